"""End to end on a tiny random Llama: run-study produces every artefact, resumes, and refuses mixed configs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from leakaudit.config import load_config
from leakaudit.errors import ConfigError
from leakaudit.study import Study


def _cfg(tmp_path, tiny_model_dir, *extra):
    return load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}",
                                                 "name=e2e", *extra])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("study")
    cfg = _cfg(tmp, tiny_model_dir)
    root = Study(cfg, progress=False, log=lambda m: None).run_all()
    return cfg, root


def test_every_artefact_written(finished_run):
    cfg, root = finished_run
    for name in ("study.yaml", "env.json", "records.jsonl", "membership.parquet", "plan.json", "scores.parquet",
                 "metrics.json", "metrics.csv", "report.html"):
        assert (root / name).is_file(), name
    for model_id in ("math-s0", "math-s1", "math-s2", "math-s3", "math-null"):
        assert (root / "models" / model_id / "DONE").is_file()
        assert (root / "signals" / "fixed" / f"{model_id}.npz").is_file()
    assert (root / "signals" / "fixed" / "base.npz").is_file()
    env = json.loads((root / "env.json").read_text())
    assert env["libraries"]["torch"] and env["seed"] == cfg.seed


def test_scores_cover_every_attack_target_and_record(finished_run):
    from attacks import list_attacks

    cfg, root = finished_run
    scores = pd.read_parquet(root / "scores.parquet")
    targets = {"math-s0", "math-s1", "math-s2", "math-s3", "math-null"}
    assert set(scores.target) == targets
    assert set(scores.attack_name) == {s.name for s in list_attacks()}
    per = scores.groupby(["target", "attack"]).size()
    assert (per == cfg.data.n_candidates).all()
    # labels come from the plan: each real target has exactly half its candidates as members
    for t in targets - {"math-null"}:
        sub = scores[(scores.target == t) & (scores.attack_name == "leaky")]
        assert sub.is_member.sum() == cfg.data.n_candidates // 2
    assert scores[scores.target == "math-null"].null_check.all()


def test_resume_skips_completed_stages(finished_run, tiny_model_dir):
    cfg, root = finished_run
    before = {p: p.stat().st_mtime_ns for p in [root / "scores.parquet", root / "models/math-s0/DONE",
                                                root / "signals/fixed/base.npz"]}
    logs = []
    Study(cfg, progress=False, log=logs.append).run_all()
    after = {p: p.stat().st_mtime_ns for p in before}
    assert before == after


def test_force_redoes_a_stage_and_its_successors(finished_run):
    cfg, root = finished_run
    scores_before = (root / "scores.parquet").stat().st_mtime_ns
    model_before = (root / "models/math-s0/DONE").stat().st_mtime_ns
    Study(cfg, force=["attacks"], progress=False, log=lambda m: None).run_all()
    assert (root / "scores.parquet").stat().st_mtime_ns != scores_before
    assert (root / "models/math-s0/DONE").stat().st_mtime_ns == model_before
    assert (root / "report.html").is_file()


def test_changed_config_is_refused(finished_run, tiny_model_dir):
    cfg, root = finished_run
    other = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={root.parent}",
                                                  "name=e2e", "training.epochs=2"])
    with pytest.raises(ConfigError, match="different config"):
        Study(other, progress=False, log=lambda m: None).run_all()


def test_crash_in_training_loses_only_that_stage(tmp_path, tiny_model_dir, monkeypatch):
    import shadow_models

    cfg = _cfg(tmp_path, tiny_model_dir)
    real = shadow_models.train_student
    calls = []

    def flaky(*args, **kwargs):
        calls.append(kwargs.get("model_id"))
        if len(calls) == 2:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(shadow_models, "train_student", flaky)
    with pytest.raises(RuntimeError, match="simulated"):
        Study(cfg, progress=False, log=lambda m: None).run_all()
    root = cfg.run_dir
    assert (root / "records.jsonl").is_file() and (root / "membership.parquet").is_file()
    assert (root / "models" / calls[0] / "DONE").is_file()
    assert not (root / "models" / calls[1] / "DONE").exists()
    monkeypatch.setattr(shadow_models, "train_student", real)
    Study(cfg, progress=False, log=lambda m: None).run_all()
    assert (root / "report.html").is_file()


def test_references_score_only_their_matched_records(finished_run):
    """A reference student scores a target's fresh trajectories only on records it is matched to (OUT)."""
    import numpy as np

    from leakaudit.assemble import fresh_scorers, target_views
    from leakaudit.membership import MembershipPlan
    from leakaudit.signals.store import load_logp

    cfg, root = finished_run
    plan = MembershipPlan.load(root)
    target = "math-s0"
    views = {v.target: v for v in target_views(plan)}
    needs = fresh_scorers(plan, views[target], cfg.plan.k_refs)
    assert needs[target] is None and needs["base"] is None
    for m, rids in needs.items():
        if rids is None:
            continue
        assert not any(plan.is_member(m, r) for r in rids)
        lp = load_logp(root / "signals" / "fresh" / target, m)
        for rid, rows in lp.items():
            scored = all(np.isfinite(r).all() for r in rows)
            assert scored == (rid in rids), (m, rid)
    # every candidate has exactly k matched references
    per_record = {r: sum(r in (ids or []) for ids in needs.values()) for r in plan.candidates["math"]}
    assert set(per_record.values()) == {cfg.plan.k_refs}


def test_null_target_never_uses_its_label_source_as_reference(finished_run):
    from leakaudit.assemble import excluded_references, fresh_scorers, target_views
    from leakaudit.membership import MembershipPlan

    cfg, root = finished_run
    plan = MembershipPlan.load(root)
    null = next(v for v in target_views(plan) if v.null_check)
    assert null.label_source == "math-s0" and excluded_references(null) == ("math-s0",)
    assert "math-s0" not in fresh_scorers(plan, null, cfg.plan.k_refs)


def test_prepared_teacher_learns_from_population_and_teacher_only_records(tmp_path, tiny_model_dir):
    from leakaudit.data.records import read_jsonl

    cfg = _cfg(tmp_path, tiny_model_dir, "teacher.kind=prepared", "data.n_teacher_records=6",
               "teacher.prep={epochs: 1, batch_size: 4}")
    study = Study(cfg, progress=False, log=lambda m: None)
    study.stage_records()
    study.stage_plan()
    study.stage_teacher()
    teacher_ids = [r.record_id for r in read_jsonl(study.run.teacher_records)]
    plan = study.plan()
    candidates = set(plan.candidates["math"])
    population = set(plan.population["math"])
    assert len(teacher_ids) == 6 and not set(teacher_ids) & (candidates | population)
    assert not set(teacher_ids) & set(study.records())  # never among the records students or attacks see
    meta = json.loads((study.run.teacher / "meta.json").read_text())
    assert set(meta["record_ids"]) == population | set(teacher_ids)
    assert not set(meta["record_ids"]) & candidates
