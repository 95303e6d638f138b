"""The plan teacher (teacher.kind: plan): SFT on a code body told as numbered English steps
(leakaudit.data.code_plan), never on the body itself and never on a candidate; other domains get their restatement."""

from __future__ import annotations

import json

import pytest

from leakaudit.audit import TEACHER_KINDS, check_teacher_flag
from leakaudit.config import PREPARED_TEACHERS, load_config
from leakaudit.data.code_plan import describe_code
from leakaudit.data.records import Record
from leakaudit.data.restate import plan_statement, restate
from leakaudit.errors import ConfigError
from leakaudit.report.teacher import PREPARED_KINDS, teacher_info
from leakaudit.study import Study
from shadow_models import TeacherPrepConfig
from shadow_models.teacher_prep import prepare_teacher, sft_records


def _code(name: str, body: str) -> Record:
    prompt = f"Complete the function.\n```python\ndef {name}(xs):\n    \"\"\"Doc.\"\"\"\n```"
    return Record("code", prompt, body, source="humaneval", meta={"entry_point": name})


TOTAL = _code("total", "    s = 0\n    for x in xs:\n        s += x\n    return s\n")
LONGEST = _code("longest", "    return max(len(x) for x in xs)\n")
BROKEN = _code("broken", "    return (\n")  # does not parse as the function's body
MATH = Record("math", "Solve: what is 2 + 2?", "Step-wise solution:\n1. Thus, we have 2 + 2 = 4.\nFinal answer: 4",
              answer="4", source="champ")


def test_plan_statement_tells_a_code_body_as_steps_and_restates_other_domains():
    x = plan_statement(TOTAL)
    assert x.rule == "code.plan" and not x.is_verbatim and (x.text, x.rule) == describe_code(TOTAL)
    assert x.text.startswith("Plan:\n1. ") and "for x in xs" not in x.text  # the loop is a step, not code
    assert plan_statement(BROKEN).is_verbatim and plan_statement(BROKEN).text == BROKEN.privileged
    assert plan_statement(MATH).text == restate(MATH) and plan_statement(MATH).rule == "math.steps"


def test_plan_sft_set_trains_on_plans_and_leaves_out_what_does_not_parse():
    records = [TOTAL, BROKEN, LONGEST, MATH]
    kept, texts, info = sft_records(records, "plan")
    assert [r.record_id for r in kept] == [TOTAL.record_id, LONGEST.record_id, MATH.record_id]
    assert texts == [describe_code(TOTAL)[0], describe_code(LONGEST)[0], restate(MATH)]
    assert info == {"sft_target": "plan", "restate_rules": {"code.plan": 2, "math.steps": 1,
                                                            "verbatim.code_does_not_parse": 1},
                    "left_out_record_ids": [BROKEN.record_id]}
    assert all(r.privileged not in t for r, t in zip(kept, texts))  # never the reference itself
    with pytest.raises(ConfigError, match="sft_target='plan': none of the 1"):
        sft_records([BROKEN], "plan")


def test_plan_is_a_teacher_kind_of_every_layer_that_names_kinds():
    cfg = load_config(preset="tiny", overrides=["teacher.kind=plan"])
    assert cfg.teacher.prepared and cfg.teacher.sft_target == "plan"
    assert cfg.hash() != load_config(preset="tiny", overrides=["teacher.kind=restated"]).hash()
    assert set(cfg.to_dict()["teacher"]) == {"kind", "prep"}  # a kind, not a new key
    assert tuple(PREPARED_TEACHERS) == PREPARED_KINDS  # the report's copy of the kinds (it does not import torch)
    assert "plan" in TEACHER_KINDS
    check_teacher_flag("plan")  # the audit's --teacher accepts it (a ConfigError otherwise)


def test_plan_teacher_trains_on_plans_never_on_a_candidate(tiny_model_dir, tmp_path):
    records = [TOTAL, LONGEST, BROKEN]
    cfg = TeacherPrepConfig(epochs=1, batch_size=2, bf16_autocast=False, seed=0)
    with pytest.raises(ConfigError, match="candidate record"):
        prepare_teacher(tiny_model_dir, records, tmp_path / "bad", cfg, forbidden_ids=[TOTAL.record_id],
                        progress=False, sft_target="plan")
    assert not (tmp_path / "bad").exists()
    out = prepare_teacher(tiny_model_dir, records, tmp_path / "teacher", cfg, progress=False, sft_target="plan")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sft_target"] == "plan" and meta["n_records"] == 2 and meta["n_records_given"] == 3
    assert meta["restate_rules"] == {"code.plan": 2, "verbatim.code_does_not_parse": 1}
    assert meta["left_out_record_ids"] == [BROKEN.record_id]


@pytest.mark.heavy  # a tiny study on code records with the plan teacher, end to end through its teacher stage
def test_a_code_study_with_the_plan_teacher_prepares_it_on_plans_and_measures_it(tiny_model_dir, tmp_path):
    cfg = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "name=plan",
                                                "data.domains={code: {source: humaneval}}", "teacher.kind=plan",
                                                "data.n_teacher_records=6", "teacher.prep={epochs: 1, batch_size: 4}"])
    study = Study(cfg, progress=False, log=lambda m: None)
    root = study.run_all(until="teacher")
    meta = json.loads((root / "models" / "_teacher" / "meta.json").read_text())
    assert meta["sft_target"] == "plan" and meta["restate_rules"].get("code.plan", 0) >= 1
    lit = json.loads((root / "teacher_literalness.json").read_text())
    assert lit["teacher"] == "plan" and lit["sft_target"] == "plan"
    candidates = {r for ids in study.ctx.plan().candidates.values() for r in ids}
    assert not candidates & set(meta["record_ids"])  # never a candidate
    info = teacher_info(root)
    assert info["prepared"] and info["kind"] == "plan" and "plan" in info["description"]
