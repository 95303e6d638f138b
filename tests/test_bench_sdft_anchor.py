"""bench/bench_sdft_anchor.py, the TRL SDFTTrainer anchor benchmark, kept from rotting: a smoke run on the tiny
model (2 steps of 2 prompts x 4 new tokens per run, one run per side) must time both sides on the same records."""

from __future__ import annotations

import json

import pytest

from conftest import bench_script


def _module():
    return bench_script("bench_sdft_anchor")


# The anchor drives TRL's SDFTTrainer with the current SDFTConfig (activation_checkpointing, teacher templates...);
# TRL 1.6 / transformers 4.56 (constraints/floors.txt) name these differently, and the bench is a measurement tool,
# not part of the package, so it is tested on the pinned versions only.
@pytest.mark.current_deps
def test_smoke_tiny_both_sides(tmp_path):
    mod = _module()
    out = tmp_path / "sdft_anchor.json"
    mod.main(["--model", "tiny", "--steps", "2", "--batch", "2", "--new-tokens", "4", "--order", "ours,trl",
              "--work", str(tmp_path / "work"), "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["name"] == "sdft_anchor" and doc["params"]["steps"] == 2
    result = doc["metrics"]
    sides = result["sides"]
    assert set(sides) == {"ours", "trl"}
    for side in ("ours", "trl"):
        d = sides[side]
        assert d["measured_steps"] == 1 and d["warmup_steps_discarded"] == 1
        assert all(s > 0 for s in d["sec_per_step_all"]) and d["sec_per_step"] > 0
        assert 0 < d["completion_tokens_per_step"] <= 2 * 4
        assert all(m > 0 for m in d["peak_rss_mb"])
    assert sides["ours"]["measured_steps"] == sides["trl"]["measured_steps"]
    assert result["ratios"]["trl_over_ours"]["sec_per_step_mean"] > 0
    assert all(r["code_digest"] == result["runs"][0]["code_digest"] for r in result["runs"])
    ours, trl = (next(r for r in result["runs"] if r["side"] == s) for s in ("ours", "trl"))
    assert [sorted(x) for x in trl["record_ids"]] == [sorted(x) for x in ours["record_ids"]]  # same records
    assert trl["student_prompt_ids_identical_to_ours"] and trl["teacher_prompt_ids_identical_to_ours"]
    assert trl["mixed_precision"] == "bf16" and not trl["gradient_checkpointing"]
    for run in (ours, trl):  # every phase's Linear layers ran in bf16 on both sides; both forwards under autocast
        dtypes = run["precision"]["linear_output_dtypes_warmup_step"]
        assert set(dtypes) == {"rollout", "student_forward", "teacher_forward"}
        assert all(k.startswith("bfloat16") for v in dtypes.values() for k in v)
        assert set(dtypes["student_forward"]) == set(dtypes["teacher_forward"]) == {"bfloat16 (autocast on)"}
    assert set(trl["precision"]["linear_output_dtypes_warmup_step"]["rollout"]) == {"bfloat16 (autocast on)"}
    assert doc["machine"]["cpu"]["flags"] and doc["machine"]["loadavg_before"]
