"""bench/gpu_check.py, the prepared GPU check, kept from rotting on a CPU: its --cpu-smoke run (every part at
small shapes), its timeout / failure / budget handling, the shipped Qwen2.5-0.5B-shape config and tokenizer.
Nothing here needs a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import bench_script

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    return bench_script("gpu_check")


def _run(args: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **env}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd=REPO)


@pytest.mark.heavy
def test_cpu_smoke_runs_every_part(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    start = time.time()
    res = _run(["--cpu-smoke", "--in-process", "--out", str(out), "--work", str(work)], timeout=170)
    seconds = time.time() - start
    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["name"] == "gpu_check" and doc["params"]["cpu_smoke"] is True and doc["machine"]["cpu"]["tag"]
    report = doc["metrics"]
    assert res.returncode == 0, (res.stdout[-3000:], {k: v.get("error") for k, v in report["parts"].items()})
    parts = report["parts"]
    assert list(parts) == ["env", "models", "logprobs", "opd", "signals", "study_tiny"]
    assert all(p["ok"] for p in parts.values())
    assert parts["env"]["cpu"]["tag"] and "flags" in parts["env"]["cpu"]
    assert parts["models"]["qwen"]["architecture"] == "Qwen2ForCausalLM"
    for model in ("tiny", "qwen"):
        fp32 = parts["logprobs"][model]["fp32"]
        assert fp32["within_tolerance"] and fp32["logp_max_abs"] <= 1e-5  # CPU vs CPU: the same numbers
        assert parts["logprobs"][model]["bf16_autocast"]["logp_max_abs"] >= 0
    assert len(parts["opd"]["step_seconds"]) == parts["opd"]["shape"]["steps"] == 2
    assert parts["signals"]["sampling"]["tokens_per_s"] > 0
    assert parts["signals"]["scoring_fp32"]["continuation_tokens_per_s"] > 0
    study = parts["study_tiny"]
    assert set(study["stage_seconds"]) == {"records", "plan", "teacher", "students", "signals", "attacks", "report"}
    assert study["student_devices"] == ["cpu"] and all(study["artefacts"].values())
    assert any(line.startswith("logprobs tiny fp32") for line in report["summary"])
    assert (out / "gpu_check.log").is_file()
    print(f"cpu smoke: {seconds:.1f} s")


def test_failure_timeout_and_budget_are_reported(tmp_path):
    # _fail raises; _sleep (20 s planted) outlives its limit, min(12 s, what the 17 s budget has left less the
    # 5 s reserve) = 12 s less what _fail took, so the budget is spent when _sleep is stopped and env is skipped.
    # The limits leave a loaded machine seconds to start each part's interpreter (3 s once timed _fail out).
    out, work = tmp_path / "out", tmp_path / "work"
    res = _run(["--parts", "_fail", "_sleep", "env", "--limit-scale", "0.2", "--budget-s", "17", "--min-part-s", "1",
                "--out", str(out), "--work", str(work)], timeout=90, GPU_CHECK_SLEEP_S="20")
    assert res.returncode == 1
    parts = json.loads((out / "gpu_check.json").read_text())["metrics"]["parts"]
    assert parts["_fail"]["ok"] is False and "planted failure" in parts["_fail"]["error"]
    assert parts["_fail"]["started"] is True  # what a part recorded before failing is kept
    assert parts["_sleep"]["timed_out"] is True and parts["_sleep"]["started"] is True
    assert parts["_sleep"]["part_seconds"] < 19
    assert parts["env"]["ok"] is False and "budget" in parts["env"]["skipped"]
    assert "_fail: FAILED" in res.stdout and "_sleep: TIMEOUT" in res.stdout and "env: SKIPPED" in res.stdout


def test_parse_stage_times(gc):
    text = ("[records] done in 0.0 s\nsome line\n[students] done in 12.5 s\n"
            "[signals] skipped: finished earlier on the same inputs\n[report] done in 3 s\nwall time 20 s; report: x")
    assert gc.parse_stage_times(text) == {"records": 0.0, "students": 12.5, "report": 3.0}
    assert gc.WALL_LINE.search(text).group(1) == "20"


def test_study_command_sets_the_model_out_root_and_bf16(gc):
    cmd = gc.study_command("python", "/m", Path("/o"), "n", bf16=True)
    assert cmd[:6] == ["python", "-m", "leakaudit.cli", "run-study", "--preset", "tiny"]
    assert "base_model=/m" in cmd and "out_root=/o" in cmd and "training.bf16_autocast=true" in cmd
    assert "training.bf16_autocast=true" not in gc.study_command("python", "/m", Path("/o"), "n", bf16=False)


def test_qwen_config_is_qwen2_5_0_5b_with_the_smollm2_vocabulary(gc):
    cfg = gc.qwen_config()
    published = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                 "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                 "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "model_type": "qwen2"}
    assert {k: cfg[k] for k in published} == published
    assert cfg["vocab_size"] == 49152 and not any(k.startswith("_") for k in cfg)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen2", **d))
    n = sum(p.numel() for p in model.parameters())
    assert 400e6 < n < 405e6 and type(model).__name__ == "Qwen2ForCausalLM"
    smoke = gc.qwen_config(smoke=True)
    assert smoke["num_hidden_layers"] == 2 and smoke["model_type"] == "qwen2" and smoke["vocab_size"] == 49152


def test_shipped_tokenizer_matches_the_offline_smollm2_tokenizer(gc, tokenizer):
    from leakaudit.data.records import Record
    from leakaudit.prompting import student_prompt_ids, teacher_prompt_ids

    shipped = gc.load_tokenizer()
    assert len(shipped) == len(tokenizer) == 49152
    # SmolLM2-Instruct's own ids: bos <|im_start|> 1, eos <|im_end|> 2 (pad = eos). Not compared with the offline
    # tokenizer: on transformers 4.56 (the floor, make test-floors) its GGUF conversion gives bos = eos = pad = 1.
    assert (shipped.bos_token_id, shipped.eos_token_id, shipped.pad_token_id) == (1, 2, 2)
    rec = Record("math", "Compute 2 + 3, then explain why 0.5 * 4 = 2.", "2 + 3 = 5. The answer is 5.", answer="5")
    assert student_prompt_ids(shipped, rec) == student_prompt_ids(tokenizer, rec)
    assert teacher_prompt_ids(shipped, rec) == teacher_prompt_ids(tokenizer, rec)
    files = {p.name: p.stat().st_size for p in gc.TOKENIZER_DIR.iterdir()}
    assert sum(files.values()) < 5 * 2 ** 20, files  # small enough to travel with the working tree


def test_shell_script_parses_and_names_its_parts():
    sh = REPO / "bench" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(sh)], capture_output=True).returncode == 0
    text = sh.read_text()
    assert "nvidia-smi" in text and "bench/gpu_check.py" in text and "--budget-s" in text


def test_multi_gpu_part_says_why_it_skips_without_two_gpus(tmp_path):
    """The multi-process part runs only with 2+ GPUs visible; elsewhere it passes, says so, and trains nothing."""
    out, work = tmp_path / "out", tmp_path / "work"
    res = _run(["--cpu-smoke", "--in-process", "--parts", "opd_multi", "--out", str(out), "--work", str(work)],
               timeout=120)
    report = json.loads((out / "gpu_check.json").read_text())["metrics"]
    part = report["parts"]["opd_multi"]
    assert res.returncode == 0 and part["ok"], res.stdout[-2000:]
    assert part["gpus_visible"] == 0 and "needs 2 or more" in part["skipped"]
    assert not (work / "opd_multi").exists()
    assert any(line.startswith("opd_multi: skipped") for line in report["summary"])
