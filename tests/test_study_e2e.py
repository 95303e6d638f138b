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
def finished_run(tiny_study_run):
    return tiny_study_run  # conftest: run once per session, shared with tests/test_executors.py


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
    members = scores[scores.target != "math-null"].groupby(["target", "attack"]).is_member.sum()
    assert (members == cfg.data.n_candidates // 2).all()
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


def test_a_finished_run_resumes_with_checkpoints_turned_on(finished_run, tiny_model_dir):
    """Keeping training checkpoints is not part of the config's identity: the same run, nothing redone."""
    cfg, root = finished_run
    saving = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={root.parent}",
                                                   "name=e2e", "training.save_checkpoints=true",
                                                   "training.checkpoint_every=1"])
    before = {p: p.stat().st_mtime_ns for p in [root / "scores.parquet", root / "models/math-s0/DONE"]}
    Study(saving, progress=False, log=lambda m: None).run_all()
    assert {p: p.stat().st_mtime_ns for p in before} == before


@pytest.mark.heavy
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

    from leakaudit.membership import MembershipPlan
    from leakaudit.signals.store import load_logp

    cfg, root = finished_run
    plan = MembershipPlan.load(root)
    target = "math-s0"
    views = {v.target: v for v in plan.views()}
    k_in, k_out = plan.reference_counts(cfg.plan.n_matched_references)
    needs = plan.matched_references(views[target], k_in, k_out).fresh_scorers(target, "base")
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
    assert set(per_record.values()) == {k_out}


def test_null_target_never_uses_its_label_source_as_reference(finished_run):
    from leakaudit.membership import MembershipPlan

    cfg, root = finished_run
    plan = MembershipPlan.load(root)
    null = next(v for v in plan.views() if v.null_check)
    assert null.label_source == "math-s0" and null.excluded == ("math-s0",)
    k_in, k_out = plan.reference_counts(cfg.plan.n_matched_references)
    matched = plan.matched_references(null, k_in, k_out)
    assert "math-s0" not in matched.fresh_scorers(null.target, "base")
    assert "math-s0" not in matched.pool and "math-s0" not in set(matched.ins.ravel())


def test_prepared_teacher_learns_from_population_and_teacher_only_records(tmp_path, tiny_model_dir):
    from leakaudit.data.records import read_jsonl

    cfg = _cfg(tmp_path, tiny_model_dir, "teacher.kind=prepared", "data.n_teacher_records=6",
               "teacher.prep={epochs: 1, batch_size: 4}")
    study = Study(cfg, progress=False, log=lambda m: None)
    study.prepare()
    for stage in ("records", "plan", "teacher"):
        study.run_stage(stage)
    teacher_ids = [r.record_id for r in read_jsonl(study.run.teacher_records)]
    plan = study.plan()
    candidates = set(plan.candidates["math"])
    population = set(plan.population["math"])
    assert len(teacher_ids) == 6 and not set(teacher_ids) & (candidates | population)
    assert not set(teacher_ids) & set(study.records())  # never among the records students or attacks see
    meta = json.loads((study.run.teacher / "meta.json").read_text())
    assert set(meta["record_ids"]) == population | set(teacher_ids)
    assert not set(meta["record_ids"]) & candidates


@pytest.mark.heavy
def test_background_set_is_shared_by_every_student_and_disjoint_from_every_other_record(tmp_path, tiny_model_dir):
    """Every student and the null student of a domain train on the same background set besides their own
    records; no background record is a candidate, a population record or a teacher record."""
    from leakaudit.data.records import read_jsonl

    cfg = _cfg(tmp_path, tiny_model_dir, "data.n_background=6", "data.n_teacher_records=5")
    study = Study(cfg, progress=False, log=lambda m: None)
    study.prepare()
    for stage in ("records", "plan", "students"):
        study.run_stage(stage)
    plan = study.plan()
    background = set(plan.background["math"])
    candidates, population = set(plan.candidates["math"]), set(plan.population["math"])
    teacher_ids = {r.record_id for r in read_jsonl(study.run.teacher_records)}
    assert len(background) == 6 and len(teacher_ids) == 5
    assert not background & (candidates | population | teacher_ids)
    assert background <= {r.record_id for r in read_jsonl(study.run.records)}  # the students' records are in the run
    for model_id in study.trained_models():
        trained = set(json.loads((study.run.model(model_id) / "meta.json").read_text())["record_ids"])
        assert background <= trained
        own = trained - background
        assert own <= (population if model_id.endswith("-null") else candidates) and len(own) == 2
    saved = json.loads((study.run.plan_dir / "plan.json").read_text())
    assert saved["background"] == {"math": plan.background["math"]} and saved["params"]["n_background"] == {"math": 6}


@pytest.mark.heavy
def test_offline_references_attack_every_target_beside_the_matched_ones(tmp_path, tiny_model_dir):
    """With plan.n_offline_references every target is attacked again with the domain's offline
    references (trained on background + reference-only records, never a candidate), by the attacks that read
    references, in their offline forms, labelled '@offline'; they score every trajectory of every target."""
    import pandas as pd

    from leakaudit.io import read_json

    cfg = _cfg(tmp_path, tiny_model_dir, "data.n_background=2", "data.n_reference_records=4",
               "plan.n_offline_references=2")
    root = Study(cfg, progress=False, log=lambda m: None).run_all()
    study = Study(cfg, progress=False, log=lambda m: None)
    plan = study.plan()
    offline = plan.models_of("math", "offline")
    assert offline == ["math-off0", "math-off1"]
    cand = set(plan.candidates["math"])
    for m in offline:
        trained = set(read_json(study.run.model(m) / "meta.json")["record_ids"])
        assert not trained & cand and set(plan.background["math"]) <= trained and len(trained) == 2 + 2
    scores = pd.read_parquet(root / "scores.parquet")
    off = scores[scores.attack.str.endswith("@offline")]
    assert set(off.attack_name) >= {"leaky", "rmia", "lira_offline", "fresh_gap_max"}
    assert not {"lira_online", "loss", "ref_ratio"} & set(off.attack_name)  # no IN reference; no reference read
    assert set(off.target) == {v.target for v in plan.views()}
    # the same targets and labels as the matched rows, one row per (target, record, attack)
    assert not off.duplicated(["target", "record_id", "attack"]).any()
    matched = scores[scores.attack == "leaky"].set_index(["target", "record_id"]).is_member
    assert off[off.attack == "leaky@offline"].set_index(["target", "record_id"]).is_member.equals(matched)
    for v in plan.views():
        scored_by = read_json(study.run.fresh(v.target) / "DONE")["scored_by"]
        assert all(sorted(scored_by[m]) == sorted(cand) for m in offline)
    metrics = pd.read_csv(root / "metrics.csv")
    assert "leaky@offline" in set(metrics.attack)


@pytest.mark.heavy
def test_several_null_students_are_trained_attacked_and_pooled_in_the_null_check(tmp_path, tiny_model_dir):
    """plan.n_null_students=2: two null students, each trained on its own population records only, attacked with
    the labels of students 0 and 1; the report's null check pools both (n_targets 2, every candidate twice)."""
    import pandas as pd

    from leakaudit.io import read_json

    cfg = _cfg(tmp_path, tiny_model_dir, "data.n_population=4", "plan.n_null_students=2",
               "attacks=[{name: loss}, {name: leaky}, {name: fresh_gap_max}]")
    root = Study(cfg, progress=False, log=lambda m: None).run_all()
    study = Study(cfg, progress=False, log=lambda m: None)
    plan = study.plan()
    assert plan.models_of("math", "null") == ["math-null", "math-null1"]
    cand, pop = set(plan.candidates["math"]), set(plan.population["math"])
    owns = [set(read_json(study.run.model(m) / "meta.json")["record_ids"]) for m in ("math-null", "math-null1")]
    assert all(o <= pop and len(o) == 2 for o in owns) and not owns[0] & owns[1]
    scores = pd.read_parquet(root / "scores.parquet")
    null = scores[scores.null_check]
    assert null.groupby("target").label_source.unique().map(list).to_dict() == {
        "math-null": ["math-s0"], "math-null1": ["math-s1"]}
    for target, source in (("math-null", "math-s0"), ("math-null1", "math-s1")):
        rows = null[(null.target == target) & (null.attack == "leaky")].set_index("record_id").is_member
        assert rows.to_dict() == plan.labels(source) and set(rows.index) == cand
        assert source not in read_json(study.run.fresh(target) / "DONE")["scored_by"]
    nulls = {r["label"]: r for r in read_json(root / "metrics.json")["null_check"]}
    assert nulls["leaky"]["n_targets"] == 2 and nulls["leaky"]["n_pos"] + nulls["leaky"]["n_neg"] == 2 * len(cand)


# ---- resume checks and bad input ----------------------------------------------------------------------------
def _copy_run(finished_run, tmp_path):
    """A copy of the finished run under the same name (the name is part of the config)."""
    import shutil

    cfg, root = finished_run
    dest = tmp_path / root.name
    shutil.copytree(root, dest)
    return load_config(preset="tiny", overrides=[f"base_model={cfg.base_model}", f"out_root={tmp_path}",
                                                 "name=e2e"]), dest


def _snapshot(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_rerun_says_which_stages_were_skipped(finished_run):
    cfg, root = finished_run
    logs = []
    Study(cfg, progress=False, log=logs.append).run_all()
    for stage in ("records", "plan", "teacher", "students", "signals", "attacks", "report"):
        assert f"[{stage}] skipped: finished earlier on the same inputs" in logs


@pytest.mark.parametrize("force", [(), ("attacks",)])
def test_truncated_records_are_an_error_and_nothing_is_deleted(finished_run, tmp_path, force):
    """Before the fix: the run reported stale results as done (exit 0), and --force attacks deleted scores and
    report, then died with a KeyError."""
    from leakaudit.errors import InputError

    cfg, root = _copy_run(finished_run, tmp_path)
    records = root / "records.jsonl"
    records.write_text("".join(records.read_text().splitlines(keepends=True)[:-2]))
    before = _snapshot(root)
    with pytest.raises(InputError, match="stage 'records'.*--force records"):
        Study(cfg, force=force, progress=False, log=lambda m: None).run_all()
    assert _snapshot(root) == before


def test_report_stage_has_a_marker_and_a_missing_report_is_rebuilt(finished_run, tmp_path):
    cfg, root = _copy_run(finished_run, tmp_path)
    assert (root / "stages" / "report.json").is_file()
    (root / "report.html").unlink()
    scores = (root / "scores.parquet").read_bytes()
    logs = []
    Study(cfg, progress=False, log=logs.append).run_all()
    assert (root / "report.html").is_file() and (root / "scores.parquet").read_bytes() == scores
    assert "[attacks] skipped: finished earlier on the same inputs" in logs
    assert not any(m.startswith("[report] skipped") for m in logs)


def test_report_stage_writes_the_blind_text_null_under_its_marker(finished_run, tmp_path):
    """blind_text_null.csv is a report output: in the marker's digest, and rebuilt when deleted. Tiny preset: 4
    candidates, 2 members per target, so every distinct relabelling is enumerated (at most 4! = 24 <= 200)."""
    from leakaudit.report.blind_null import read_blind_null

    cfg, root = _copy_run(finished_run, tmp_path)
    mark = json.loads((root / "stages" / "report.json").read_text())
    assert "blind_text_null.csv" in mark["paths"]
    null = read_blind_null(root / "blind_text_null.csv")
    assert set(null["status"]) == {"ok"} and null["exact"].all() and set(null["seed"]) == {cfg.metrics.seed}
    assert set(null["level"]) == {"target", "domain", "all"} and not null["target"].str.contains("null").any()
    before = (root / "blind_text_null.csv").read_bytes()
    (root / "blind_text_null.csv").unlink()
    logs = []
    Study(cfg, progress=False, log=logs.append).run_all()
    assert (root / "blind_text_null.csv").read_bytes() == before  # same seed, same null
    assert not any(m.startswith("[report] skipped") for m in logs)
    assert any(m.startswith("[report] realism card: math (4 targets): trained on 2 records x 1 passes") for m in logs), logs


def test_report_names_the_teacher_and_its_literalness_and_old_runs_say_not_measured(finished_run, tmp_path):
    """The report reads teacher_literalness.json / sample_literalness.json (upstream outputs: the report marker's
    own paths are unchanged); a run finished before those files existed still reports, "not measured"."""
    from leakaudit.study import STAGES

    cfg, root = _copy_run(finished_run, tmp_path)
    mark = json.loads((root / "stages" / "report.json").read_text())
    assert mark["paths"] == ["blind_text_null.csv", "metrics.csv", "metrics.json", "plots", "realism.json", "report.html"]
    page = (root / "report.html").read_text()
    assert "Teacher: self (self-distillation: the frozen base student). Students distilled from: base." in page
    assert "Teacher log p per token of the privileged text: " in page and "(pooled over 4 real targets)" in page
    assert "not measured in this run" not in page
    for name in ("teacher_literalness.json", "sample_literalness.json"):
        (root / name).unlink()
    marker = Study(cfg, progress=False, log=lambda m: None)  # the markers such a run holds
    for stage in STAGES:
        marker._mark(stage)
    (root / "report.html").unlink()  # rebuilt, as any report whose outputs changed
    logs = []
    Study(cfg, progress=False, log=logs.append).run_all()
    assert "[attacks] skipped: finished earlier on the same inputs" in logs
    assert not (root / "sample_literalness.json").exists()
    page = (root / "report.html").read_text()
    assert "Teacher: self (self-distillation" in page and "Literalness: not measured in this run" in page


def test_a_hash_of_digits_only_still_resumes(tmp_path, tiny_model_dir, monkeypatch):
    """yaml reads an unquoted all-digit hash back as an int: such a run was refused as 'a different config'."""
    from leakaudit.config import StudyConfig

    monkeypatch.setattr(StudyConfig, "hash", lambda self: "851416157360")
    cfg = _cfg(tmp_path, tiny_model_dir)
    cfg.run_dir.mkdir(parents=True)
    cfg.run_dir.joinpath("study.yaml").write_text("name: e2e\n_meta:\n  config_hash: 851416157360\n")
    from leakaudit.pipeline.checks import check_run_dir_config

    study = Study(cfg, progress=False, log=lambda m: None)
    check_run_dir_config(study.run, study.cfg, forced_all=False)


def _file_study(tmp_path, tiny_model_dir, rows, *extra):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return load_config(preset="tiny", overrides=[
        f"base_model={tiny_model_dir}", f"out_root={tmp_path / 'runs'}", "name=mine",
        "data.domains={math: {source: file, options: {path: " + str(path) + "}}}", *extra])


def _rows(n=10):
    return [{"domain": "math", "prompt": f"What is {i} + {i}?", "privileged": f"{i} + {i} = {2 * i}."}
            for i in range(n)]


@pytest.mark.parametrize("drop", ["true", "false"])
def test_a_users_record_over_budget_is_an_error_naming_path_line_and_record(tmp_path, tiny_model_dir, drop):
    """Before the fix such records were silently dropped (drop_over_budget: true), or named only "source 'file'"."""
    from leakaudit.errors import InputError

    rows = _rows()
    rows[6]["privileged"] = "word " * 500
    cfg = _file_study(tmp_path, tiny_model_dir, rows, f"data.drop_over_budget={drop}")
    with pytest.raises(InputError, match=r"mine\.jsonl, line 7, record [0-9a-f]{16}, field 'privileged'.*budget"):
        Study(cfg, progress=False, log=lambda m: None).run_all()
    assert not (tmp_path / "runs").exists()  # nothing written: the fixed file is not refused as "a different config"
    rows[6]["privileged"] = "short."
    cfg = _file_study(tmp_path, tiny_model_dir, rows, f"data.drop_over_budget={drop}")
    Study(cfg, progress=False, log=lambda m: None).prepare()


def test_a_records_own_domain_is_never_relabelled(tmp_path, tiny_model_dir):
    """Before the fix the study silently relabelled it to the configured domain (and so changed its id)."""
    from leakaudit.errors import InputError

    rows = _rows()
    rows[3]["domain"] = "algebra"
    cfg = _file_study(tmp_path, tiny_model_dir, rows)
    with pytest.raises(InputError, match=r"mine\.jsonl, line 4, .*has domain 'algebra'"):
        Study(cfg, progress=False, log=lambda m: None).run_all()
    assert not (tmp_path / "runs").exists()
    builtin = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}",
                                                    "data.domains={algebra: {source: champ}}"])
    with pytest.raises(InputError, match="has domain 'math'"):
        Study(builtin, progress=False, log=lambda m: None).run_all()


def test_a_student_trained_on_other_records_is_not_reused(finished_run, tmp_path):
    from leakaudit.errors import InputError

    cfg, root = _copy_run(finished_run, tmp_path)
    meta = root / "models" / "math-s1" / "meta.json"
    info = json.loads(meta.read_text())
    info["record_ids"] = info["record_ids"][:1]
    meta.write_text(json.dumps(info))
    with pytest.raises(InputError, match="stage 'students'"):  # its marker no longer matches
        Study(cfg, progress=False, log=lambda m: None).run_all()
    (root / "stages" / "students.json").unlink()  # without a marker, the model's own record list is checked
    with pytest.raises(InputError, match="models/math-s1 was trained on other records"):
        Study(cfg, progress=False, log=lambda m: None).run_all()


def test_assembled_inputs_line_up_references_and_population(finished_run):
    """fixed_ref_cols points each fixed_refs row at the population column of the same model, and the null target's
    population leaves out the records it trained on (before the fix RMIA used them as its population)."""
    import numpy as np

    from leakaudit.assemble import run_inputs
    from leakaudit.data.records import read_jsonl
    from leakaudit.membership import MembershipPlan
    from leakaudit.rundir import RunDir
    from leakaudit.signals.store import load_fixed

    cfg, root = finished_run
    run, plan = RunDir(root), MembershipPlan.load(root)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    k_in, k_out = plan.reference_counts(cfg.plan.n_matched_references)
    for view, inputs in run_inputs(run, plan, records, cfg.plan.n_matched_references):
        matched = plan.matched_references(view, k_in, k_out)
        trained = set(plan.members(view.target))
        pop = [z for z in plan.population["math"] if z not in trained]
        if view.null_check:
            assert len(pop) == len(plan.population["math"]) - cfg.data.n_candidates // 2
        else:
            assert pop == plan.population["math"]
        assert len(inputs.population_target) == len(pop)
        for i, rid in enumerate(inputs.record_ids):
            models = list(matched.ins[i]) + list(matched.outs[i])
            for row, (m, col) in enumerate(zip(models, inputs.fixed_ref_cols[i])):
                assert matched.pool[col] == m
                fixed = load_fixed(run.fixed(m))
                np.testing.assert_allclose(inputs.population_refs[:, col], [fixed[z].logp.mean() for z in pop],
                                           rtol=1e-6)
                np.testing.assert_allclose(inputs.fixed_refs[i][row], fixed[rid].logp, rtol=1e-6)


def test_an_attack_without_its_signals_is_refused_before_training(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, "data.n_population=0", "plan.null_student=false")
    with pytest.raises(ConfigError, match=r"data.n_population: attacks \['rmia'\]"):
        Study(cfg, progress=False, log=lambda m: None).run_all()
    assert not cfg.run_dir.exists()
    ok = _cfg(tmp_path, tiny_model_dir, "data.n_population=0", "plan.null_student=false", "attacks=[{name: loss}]")
    Study(ok, progress=False, log=lambda m: None).prepare()


def test_run_all_until_stops_after_that_stage_and_a_later_run_resumes(tmp_path, tiny_model_dir):
    from leakaudit import stage_marks

    study = Study(_cfg(tmp_path, tiny_model_dir), progress=False, log=lambda m: None)
    root = study.run_all(until="plan")
    assert [s for s in ("records", "plan", "teacher", "students") if stage_marks.read_mark(root, s)] == \
        ["records", "plan"]
    assert not (root / "models").exists() or not any((root / "models").iterdir())
    # again on the finished prefix: every stage up to `until` is skipped, and it still stops there (it ran the
    # whole study before the fix, which is how experiments/pass_curve.py's rerun trained students without its hook)
    Study(_cfg(tmp_path, tiny_model_dir), progress=False, log=lambda m: None).run_all(until="plan")
    assert stage_marks.read_mark(root, "teacher") is None and stage_marks.read_mark(root, "students") is None


def test_run_all_until_an_unknown_stage_is_refused_before_anything_is_written(tmp_path, tiny_model_dir):
    with pytest.raises(ConfigError, match="until: unknown stage 'trainng'"):
        Study(_cfg(tmp_path, tiny_model_dir), progress=False, log=lambda m: None).run_all(until="trainng")
    assert not any(tmp_path.iterdir())


@pytest.mark.heavy
def test_one_student_trained_by_hand_with_an_epoch_hook_is_reused_by_the_full_run(tmp_path, tiny_model_dir,
                                                                                    finished_run):
    """experiments/pass_curve.py's flow: stop after the teacher, train one student with an epoch hook, then the full
    run reuses it (its DONE untouched) and every score equals the run made without the hook."""
    cfg = _cfg(tmp_path, tiny_model_dir)
    study = Study(cfg, progress=False, log=lambda m: None)
    root = study.run_all(until="teacher")
    model_id = study.trained_models()[0]
    epochs: list[int] = []
    study.train_one(model_id, epoch_hook=lambda epoch, model: epochs.append(epoch))
    assert epochs == list(range(cfg.training.epochs))
    done = (root / "models" / model_id / "DONE").stat().st_mtime_ns
    Study(cfg, progress=False, log=lambda m: None).run_all()
    assert (root / "models" / model_id / "DONE").stat().st_mtime_ns == done
    ref_cfg, ref_root = finished_run
    assert (root / "metrics.csv").read_bytes() == (ref_root / "metrics.csv").read_bytes()


def test_a_resumed_run_refuses_a_plan_rebuilt_otherwise_than_it_saved(tmp_path, tiny_model_dir, monkeypatch):
    """The plan stage's mark covers the config and earlier outputs, not the plan code: before, a change in how the
    plan is drawn (here: another seed inside keep_matrix) resumed silently, students training on the new plan while
    the report read the saved one."""
    import leakaudit.pipeline.study_design as study_mod
    from leakaudit.errors import InputError

    root = Study(_cfg(tmp_path, tiny_model_dir), progress=False, log=lambda m: None).run_all(until="plan")
    saved = sorted(p.name for p in root.rglob("*"))
    drawn = study_mod.keep_matrix_plan
    monkeypatch.setattr(study_mod, "keep_matrix_plan", lambda *a, **kw: drawn(*a, **{**kw, "seed": kw["seed"] + 1}))
    with pytest.raises(InputError, match="plan rebuilt from this config differs"):
        Study(_cfg(tmp_path, tiny_model_dir), progress=False, log=lambda m: None).prepare()
    assert sorted(p.name for p in root.rglob("*")) == saved  # refused before anything was written
    monkeypatch.setattr(study_mod, "keep_matrix_plan", drawn)
    Study(_cfg(tmp_path, tiny_model_dir), progress=False, log=lambda m: None).prepare()  # the same plan resumes


def test_two_domains_may_not_share_a_record_id():
    from leakaudit.data.records import Record
    from leakaudit.errors import InputError
    from leakaudit.study import unique_by_id

    a = Record(record_id="r1", domain="alpha", prompt="p", privileged="x")
    b = Record(record_id="r1", domain="beta", prompt="q", privileged="y")
    assert unique_by_id([a, a]) == {"r1": a}  # one record listed twice (e.g. background and population) is one
    with pytest.raises(InputError, match="domains 'alpha' and 'beta'") as e:
        unique_by_id([a, b])
    assert e.value.record_id == "r1"


def test_train_refuses_a_run_whose_study_yaml_was_edited(tmp_path, tiny_model_dir, capsys):
    """`leakaudit train --plan` checked nothing before: with study.yaml edited after the plan, it trained a student
    under the new config, and run-study later reused it (finished students are checked by their record ids)."""
    from leakaudit.cli import main
    from leakaudit.config import load_config

    root = Study(_cfg(tmp_path, tiny_model_dir), progress=False, log=lambda m: None).run_all(until="plan")
    cfg = load_config(root / "study.yaml")
    cfg.out_root, cfg.name = str(root.parent), root.name
    Study(cfg, progress=False, log=lambda m: None).check_before_training()  # as made: nothing to refuse
    text = (root / "study.yaml").read_text()
    assert "epochs: 1\n" in text
    (root / "study.yaml").write_text(text.replace("epochs: 1\n", "epochs: 3\n", 1))
    before = sorted(p.name for p in root.rglob("*"))
    code = main(["train", "--plan", str(root), "--model-id", "math-s0"])
    assert code == 2 and "different config" in capsys.readouterr().err
    assert sorted(p.name for p in root.rglob("*")) == before


def test_a_score_job_cut_between_two_files_is_redone_over_all_its_targets(finished_run, tmp_path, monkeypatch):
    """A model scores every target's trajectories in one batched call (score_fresh_all). Killed after writing some of
    its files (no target marked done yet), the rerun must hand it all its targets again, not only the missing one,
    so its batches and the file it writes are the uninterrupted run's. Before the fix only the missing target."""
    cfg, root = _copy_run(finished_run, tmp_path)
    study = Study(cfg, progress=False, log=lambda m: None)
    targets = [v.target for v in study.plan().views()]
    scorers = study.fresh_scorers(targets)
    model = "math-s1"
    scored = [t for t in targets if model in scorers[t]]
    assert len(scored) >= 2
    lost = study.run.fresh(scored[-1]) / f"logp__{model}.npz"
    want = lost.read_bytes()
    lost.unlink()
    for t in targets:  # killed before the stage marked any target done
        (study.run.fresh(t) / "DONE").unlink()
    calls = {}
    from leakaudit.pipeline import signals_stage

    real = signals_stage.score_one

    def spy(ctx, model_id, fixed, fresh):
        calls[model_id] = [t for t, _ in fresh]
        return real(ctx, model_id, fixed, fresh)

    monkeypatch.setattr(signals_stage, "score_one", spy)  # what the score jobs call (leakaudit.pipeline.jobs)
    study.run_stage("signals")
    assert calls == {model: scored}
    assert lost.read_bytes() == want
    assert all((study.run.fresh(t) / "DONE").is_file() for t in targets)
