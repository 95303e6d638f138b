"""The restated teacher (teacher.kind: restated) and the literalness measurements every run writes:
SFT on restatements, never on a candidate, end to end on the tiny preset."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from leakaudit.config import load_config
from leakaudit.data.records import Record
from leakaudit.data.restate import restate
from leakaudit.errors import ConfigError, InputError
from leakaudit.literalness import auroc, similarity, summary_line, teacher_literalness
from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE, continuation_ids, student_prompt_ids, teacher_prompt_ids
from leakaudit.study import STAGES, Study
from shadow_models import TeacherPrepConfig
from shadow_models.teacher_prep import prepare_teacher, sft_example, sft_records


def _math(i: int) -> Record:
    return Record("math", f"Solve: what is {i} + {i}?",
                  f"Step-wise solution:\n1. Thus, we have {i} + {i} = {2 * i}.\nFinal answer: {2 * i}",
                  answer=str(2 * i), source="champ")


UNRESTATABLE = Record("medical", "Which drug?", "The correct answer is B. Aspirin.", answer="B", source="medqa")


# ---- SFT set ----------------------------------------------------------------------------------------------------
def test_restated_sft_set_leaves_out_what_no_rule_restates_and_counts_it():
    records = [_math(1), UNRESTATABLE, _math(2)]
    kept, texts, info = sft_records(records, "restated")
    assert [r.record_id for r in kept] == [records[0].record_id, records[2].record_id]
    assert texts == [restate(records[0]), restate(records[2])] and texts[0].startswith("Answer: 2\n")
    assert info == {"sft_target": "restated", "restate_rules": {"math.steps": 2, "verbatim.medical_not_a_note": 1},
                    "left_out_record_ids": [UNRESTATABLE.record_id]}
    same, none, info = sft_records(records, "privileged")
    assert same == records and none == [None] * 3 and info == {"sft_target": "privileged"}
    with pytest.raises(ConfigError, match="none of the 1 teacher records can be restated"):
        sft_records([UNRESTATABLE], "restated")
    with pytest.raises(ConfigError, match="sft_target"):
        sft_records(records, "paraphrased")


def test_sft_example_trains_on_the_restatement_after_the_privileged_context(tokenizer):
    rec = _math(3)
    ids, labels = sft_example(tokenizer, rec, DEFAULT_TEACHER_TEMPLATE, 1024, restate(rec))
    prompt = teacher_prompt_ids(tokenizer, rec, DEFAULT_TEACHER_TEMPLATE)
    assert ids[:len(prompt)] == prompt and labels[:len(prompt)] == [-100] * len(prompt)
    assert ids[len(prompt):] == labels[len(prompt):] == continuation_ids(tokenizer, restate(rec))
    assert sft_example(tokenizer, rec, DEFAULT_TEACHER_TEMPLATE, 1024)[0][len(prompt):] == \
        continuation_ids(tokenizer, rec.privileged)


def test_restated_teacher_refuses_a_candidate_and_trains_on_restatements(tiny_model_dir, tmp_path):
    records = [_math(i) for i in range(1, 5)] + [UNRESTATABLE]
    cfg = TeacherPrepConfig(epochs=1, batch_size=2, bf16_autocast=False, seed=0)
    for forbidden in (records[1].record_id, UNRESTATABLE.record_id):  # checked before anything is left out
        with pytest.raises(ConfigError, match="candidate record"):
            prepare_teacher(tiny_model_dir, records, tmp_path / "bad", cfg, forbidden_ids=[forbidden],
                            progress=False, sft_target="restated")
    assert not (tmp_path / "bad").exists()
    out = prepare_teacher(tiny_model_dir, records, tmp_path / "teacher", cfg, progress=False, sft_target="restated")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["sft_target"] == "restated" and meta["n_records"] == 4 and meta["n_records_given"] == 5
    assert meta["record_ids"] == [r.record_id for r in records[:4]]
    assert meta["left_out_record_ids"] == [UNRESTATABLE.record_id]
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    assert {r for e in ledger for r in e["record_ids"]} == set(meta["record_ids"])


# ---- literalness -------------------------------------------------------------------------------------------------
class _StubBackend:
    """log p of every token = -(prefix length) / 1000, so with-context scores are lower than without."""

    def __init__(self):
        self.calls = []

    def score(self, prefixes, continuations, *, vocab_stats=False):
        from leakaudit.signals.backend import TokenScores

        self.calls.append((prefixes, continuations))
        return [TokenScores(np.full(len(c), -len(p) / 1000, dtype=np.float32)) for p, c in zip(prefixes, continuations)]


def test_teacher_literalness_scores_privileged_and_restated_with_and_without_context(tokenizer):
    records = [_math(1), _math(2), UNRESTATABLE]
    backend = _StubBackend()
    out = teacher_literalness(backend, tokenizer, records, DEFAULT_TEACHER_TEMPLATE)
    with_ctx, privileged = backend.calls[0]
    assert with_ctx == [teacher_prompt_ids(tokenizer, r, DEFAULT_TEACHER_TEMPLATE) for r in records]
    assert backend.calls[1][0] == [student_prompt_ids(tokenizer, r) for r in records]
    assert privileged == [continuation_ids(tokenizer, r.privileged) for r in records]
    assert backend.calls[2][1] == [continuation_ids(tokenizer, restate(r)) for r in records[:2]]
    rec = out["per_record"][records[0].record_id]
    assert rec["privileged_with_context"] == pytest.approx(-len(with_ctx[0]) / 1000, abs=1e-4)
    assert rec["privileged_without_context"] == pytest.approx(-len(student_prompt_ids(tokenizer, records[0])) / 1000,
                                                              abs=1e-4)
    assert out["per_record"][UNRESTATABLE.record_id]["restated_with_context"] is None
    math_row = out["domains"]["math"]
    assert math_row["n_records"] == 2 and math_row["n_restated"] == 2
    assert math_row["privileged_context_gain"] < 0  # the stub penalises longer prefixes
    assert out["domains"]["medical"]["restated_with_context"] is None


def test_similarity_and_auroc():
    assert similarity("abc", "abcdef") == 1.0 and similarity("xyz", "abcdef") == 0.0
    assert similarity("", "abc") == 0.0
    assert auroc([True, True, False, False], [0.9, 0.8, 0.1, 0.2]) == 1.0
    assert auroc([True, False], [0.5, 0.5]) == 0.5
    assert auroc([True, True], [0.1, 0.2]) is None


# ---- config -----------------------------------------------------------------------------------------------------
def test_restated_is_a_teacher_kind_and_adds_no_config_field():
    prepared = load_config(preset="tiny", overrides=["teacher.kind=prepared"])
    restated = load_config(preset="tiny", overrides=["teacher.kind=restated"])
    assert restated.teacher.prepared and restated.teacher.sft_target == "restated"
    assert prepared.teacher.prepared and prepared.teacher.sft_target == "privileged"
    selfish = load_config(preset="tiny")
    assert not selfish.teacher.prepared and selfish.teacher.sft_target is None
    assert restated.hash() != prepared.hash()
    # a kind, not a new key: the resolved config of every existing preset (hence its hash) is unchanged
    assert set(selfish.to_dict()["teacher"]) == {"kind", "prep"}


# ---- end to end -------------------------------------------------------------------------------------------------
def _cfg(root, tiny_model_dir, *extra):
    return load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={root}", "name=restated",
                                                 "teacher.kind=restated", "data.n_teacher_records=6",
                                                 "teacher.prep={epochs: 1, batch_size: 4}", *extra])


@pytest.fixture(scope="module")
def restated_run(tmp_path_factory, tiny_model_dir):
    cfg = _cfg(tmp_path_factory.mktemp("restated"), tiny_model_dir)
    logs = []
    root = Study(cfg, progress=False, log=logs.append).run_all()
    return cfg, root, logs


@pytest.mark.heavy  # the module's whole restated-teacher study
def test_restated_study_trains_its_teacher_on_restatements_of_non_candidates(restated_run):
    from leakaudit.data.records import read_jsonl
    from leakaudit.membership import MembershipPlan

    cfg, root, _ = restated_run
    plan = MembershipPlan.load(root)
    candidates = set(plan.candidates["math"])
    teacher_only = {r.record_id for r in read_jsonl(root / "teacher_records.jsonl")}
    meta = json.loads((root / "models" / "_teacher" / "meta.json").read_text())
    assert meta["sft_target"] == "restated" and meta["restate_rules"] == {"math.steps": 10}
    assert set(meta["record_ids"]) == set(plan.population["math"]) | teacher_only
    assert not set(meta["record_ids"]) & candidates
    for model_id in ("math-s0", "math-null"):  # students distil from the prepared teacher
        assert json.loads((root / "models" / model_id / "meta.json").read_text())["teacher_model"] == \
            str(root / "models" / "_teacher")


@pytest.mark.heavy  # the module's whole restated-teacher study
def test_restated_study_writes_both_literalness_files(restated_run):
    from leakaudit.literalness import load

    cfg, root, logs = restated_run
    teacher, samples = load(root)
    assert teacher["teacher"] == "restated" and teacher["sft_target"] == "restated"
    assert teacher["teacher_model"] == "models/_teacher" and teacher["sft"]["restate_rules"] == {"math.steps": 10}
    row = teacher["domains"]["math"]
    assert row["n_records"] == cfg.data.n_candidates == row["n_restated"]
    assert all(math.isfinite(row[k]) for k in ("privileged_with_context", "privileged_without_context",
                                               "restated_with_context", "restated_without_context"))
    assert set(samples["targets"]) == {"math-s0", "math-s1", "math-s2", "math-s3", "math-null"}
    pooled = samples["pooled_real_targets"]
    assert pooled["n_targets"] == 4 and pooled["n_members"] == pooled["n_non_members"] == 8
    assert 0 <= pooled["members"] <= 1 and pooled["auroc"] is not None
    assert len(samples["per_record"]) == 5 * cfg.data.n_candidates
    line = summary_line(teacher, samples)
    assert line.startswith("teacher restated (SFT target: restated)") and "over 4 targets" in line
    assert any(m.startswith("[attacks] teacher restated") for m in logs)


@pytest.mark.heavy  # the module's whole restated-teacher study
def test_restated_study_resumes_and_old_runs_without_the_files_still_resume(restated_run, tmp_path):
    cfg, root, _ = restated_run
    logs = []
    Study(cfg, progress=False, log=logs.append).run_all()
    assert all(f"[{s}] skipped: finished earlier on the same inputs" in logs for s in STAGES)
    # a run finished before the literalness files existed: same markers as this code writes without them
    old = tmp_path / root.name
    shutil.copytree(root, old)
    for name in ("teacher_literalness.json", "sample_literalness.json"):
        (old / name).unlink()
    old_cfg = load_config(preset="tiny", overrides=[f"base_model={cfg.base_model}", f"out_root={tmp_path}",
                                                    "name=restated", "teacher.kind=restated",
                                                    "data.n_teacher_records=6",
                                                    "teacher.prep={epochs: 1, batch_size: 4}"])
    marker = Study(old_cfg, progress=False, log=lambda m: None)
    for stage in STAGES:
        marker._mark(stage)
    logs = []
    Study(old_cfg, progress=False, log=logs.append).run_all()
    assert all(f"[{s}] skipped: finished earlier on the same inputs" in logs for s in STAGES)
    assert not (old / "teacher_literalness.json").exists()
    # ...while deleting the file from a run that wrote it is noticed
    (root / "sample_literalness.json").unlink()
    with pytest.raises(InputError, match="outputs of stage 'attacks'"):
        Study(cfg, progress=False, log=lambda m: None).run_all()
    Study(cfg, force=["attacks"], progress=False, log=lambda m: None).run_all()
    assert (root / "sample_literalness.json").is_file()


@pytest.mark.heavy  # the module's whole restated-teacher study
def test_restated_study_report_names_its_teacher_and_shows_the_literalness_it_measured(restated_run):
    """The report stage reads both literalness files and the teacher's meta.json (every run's report
    names which teacher it used and measures how literal it was)."""
    from leakaudit.literalness import load
    from leakaudit.report.teacher import literalness_summary

    _, root, _ = restated_run
    meta = json.loads((root / "models" / "_teacher" / "meta.json").read_text())
    page = (root / "report.html").read_text()
    assert (f"Teacher: restated (non-copying: the base fine-tuned to answer from its context in another surface "
            f"form (leakaudit.data.restate)); prepared on {meta['n_records']} records (never a candidate)") in page
    s = literalness_summary(*load(root))
    t, p = s["teacher"], s["samples"]
    assert (f"Teacher log p per token of the privileged text: {t['with_context']:.3f} with context vs "
            f"{t['without_context']:.3f} without (mean over {t['candidates']} candidates).") in page
    assert (f"members {p['members']:.3f} vs non-members {p['non_members']:.3f}, AUROC {p['auroc']:.3f} (pooled "
            f"over 4 real targets).") in page
    report = json.loads((root / "metrics.json").read_text())
    assert report["teacher"]["kind"] == "restated" and report["teacher"]["n_records"] == meta["n_records"]
    assert report["literalness"]["measured"] == {"teacher": True, "samples": True}
