"""experiments/protocol_runs.py: the protocol's rules in code (hand-made evidence files), the runs' names and
settings, and that the medical development run started before the script resumes under it (same config hash)."""

from __future__ import annotations

import json

import pytest

from conftest import experiment_script

P = experiment_script("protocol_runs")


def _metrics(root, *, moved: dict[str, bool] | None = None, held_out: list[float | None] | None = None):
    root.mkdir(parents=True, exist_ok=True)
    health = [{"model_id": m, "moved_toward_teacher": v} for m, v in (moved or {}).items()]
    rows = [{"null_check": False, "quality_held_out": q} for q in (held_out or [])]
    rows.append({"null_check": True, "quality_held_out": 1.0})  # the null student never counts
    (root / "metrics.json").write_text(json.dumps({"training_health": health, "realism": {"rows": rows}}))
    return root


def test_students_moved_counts_targets_and_the_null_student_not_offline_references(tmp_path):
    moved = {**{f"medical-s{i}": i != 3 for i in range(8)}, "medical-null": False,
             **{f"medical-off{i}": False for i in range(8)}}
    assert P.students_moved(_metrics(tmp_path / "r", moved=moved)) == (7, 9)


def test_held_out_answer_match_is_the_mean_over_targets_without_the_null_student(tmp_path):
    assert P.held_out_answer_match(_metrics(tmp_path / "r", held_out=[0.0, 0.25, None, 0.05])) == pytest.approx(0.1)


def test_medical_keeps_8_passes_at_7_of_9_and_falls_back_to_3_below(tmp_path, monkeypatch):
    out = tmp_path / "runs"
    name = P.run_name("medical", "passes8", P.DEV_SEED)
    monkeypatch.setattr(P, "run", lambda d, label, seed, root, **kw: root / P.run_name(d, label, seed))
    _metrics(out / name, moved={**{f"medical-s{i}": i < 7 for i in range(8)}, "medical-null": False})
    assert P.choose_medical(out, False)["chosen"] == "passes8"
    _metrics(out / name, moved={**{f"medical-s{i}": i < 6 for i in range(8)}, "medical-null": False})
    choice = P.choose_medical(out, False)
    assert choice["chosen"] == "passes3" and choice["evidence"]["students_moved"] == [6, 9]


def test_math_takes_the_cheapest_option_that_reaches_the_match_and_stops_there(tmp_path, monkeypatch):
    out, ran = tmp_path / "runs", []
    matches = {"restated48": [0.05, 0.05], "prepared128": [0.1, 0.12], "prepared192": [0.5, 0.5]}
    for label, values in matches.items():
        _metrics(out / P.run_name("math", label, P.DEV_SEED), held_out=values)

    def fake_run(d, label, seed, root, **kw):
        ran.append(label)
        return root / P.run_name(d, label, seed)

    monkeypatch.setattr(P, "run", fake_run)
    choice = P.choose_math(out, False)
    assert choice["chosen"] == "prepared128" and ran == ["restated48", "prepared128"]  # 192 never run
    assert choice["evidence"]["held_out_answer_match"] == pytest.approx({"restated48": 0.05, "prepared128": 0.11})


def test_math_without_a_passing_option_takes_the_highest_match(tmp_path, monkeypatch):
    out = tmp_path / "runs"
    for label, values in {"restated48": [0.02], "prepared128": [0.08], "prepared192": [0.04]}.items():
        _metrics(out / P.run_name("math", label, P.DEV_SEED), held_out=values)
    monkeypatch.setattr(P, "run", lambda d, label, seed, root, **kw: root / P.run_name(d, label, seed))
    assert P.choose_math(out, False)["chosen"] == "prepared128"


def test_code_tries_the_least_literal_teacher_first_and_needs_7_students(tmp_path, monkeypatch):
    out, full_runs = tmp_path / "runs", []
    logp = {"restated": -0.02, "plan": -1.7}  # the plan teacher is far less likely to emit the canonical body
    for label, n_moved in {"restated": 9, "plan": 6}.items():
        root = _metrics(out / P.run_name("code", label, P.DEV_SEED),
                        moved={**{f"code-s{i}": i < n_moved for i in range(8)}, "code-null": n_moved > 8})
        (root / "teacher_literalness.json").write_text(
            json.dumps({"domains": {"code": {"privileged_with_context": logp[label]}}}))

    def fake_run(d, label, seed, root, until=None, **kw):
        if until is None:
            full_runs.append(label)
        return root / P.run_name(d, label, seed)

    monkeypatch.setattr(P, "run", fake_run)
    choice = P.choose_code(out, False)
    # plan first (least literal) but only 6 of 9 moved; then restated, 9 of 9
    assert full_runs == ["plan", "restated"] and choice["chosen"] == "restated"
    assert choice["evidence"]["students_moved"] == {"plan": [6, 9], "restated": [9, 9]}


def test_every_run_is_a_valid_config_of_the_design_and_the_started_medical_run_resumes():
    from leakaudit.config import load_config

    out = "/root/leakaudit-runs"
    cfg = load_config(P.DESIGN, overrides=P.overrides("medical", "passes8", P.DEV_SEED, out))
    assert cfg.hash() == "334e8f253008"  # the study.yaml of the run started before the script
    for domain, options in P.OPTIONS.items():
        for label, _ in options:
            for seed in (P.DEV_SEED, *P.TEST_SEEDS):
                c = load_config(P.DESIGN, overrides=P.overrides(domain, label, seed, out))
                assert list(c.data.domains) == [domain] and c.seed == seed
                assert c.data.n_candidates == 48 and c.plan.n_offline_references == 8
    assert load_config(P.DESIGN, overrides=P.overrides("math", "prepared192", 6, out)).training.max_new_tokens == 192


def test_test_seeds_run_the_option_the_rule_chose(tmp_path, monkeypatch, capsys):
    """main() runs each domain's test seeds with the rule's choice: read from protocol_choices.json when it was
    decided earlier, and in a dry run the choice its rule reports (the dry run printed the first option instead)."""
    calls = []
    monkeypatch.setattr(P, "run", lambda d, label, seed, root, **kw: calls.append((d, label, seed)) or root)
    monkeypatch.setattr("sys.argv", ["protocol_runs", "--out-root", str(tmp_path), "--domains", "code", "--dry-run"])
    P.main()
    assert [c for c in calls if c[2] in P.TEST_SEEDS] == [("code", "plan", s) for s in P.TEST_SEEDS]
    calls.clear()
    (tmp_path / "protocol_choices.json").write_text(json.dumps({"code": {"chosen": "restated"}}))
    monkeypatch.setattr("sys.argv", ["protocol_runs", "--out-root", str(tmp_path), "--domains", "code"])
    P.main()
    assert calls == [("code", "restated", s) for s in P.TEST_SEEDS]
