"""The progress view's status table, read from a run directory's DONE markers and ledgers (golden values)."""

from __future__ import annotations

import json

from leakaudit.progress import StageProgress, read_ledger, running_line, student_statuses
from leakaudit.rundir import RunDir


def _ledger(path, kls, partial_tail=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"step": i, "teacher_kl": kl, "loss": 0.0}) + "\n" for i, kl in enumerate(kls))
    path.write_text(lines + partial_tail)


def test_status_table_from_done_markers_and_ledgers(tmp_path):
    run = RunDir(tmp_path)
    _ledger(tmp_path / "models" / "m-done" / "ledger.jsonl", [0.9, 0.5, 0.25])
    (tmp_path / "models" / "m-done" / "DONE").write_text("{}")
    # running: two complete steps and a third line being written (no newline yet) -> not counted
    _ledger(tmp_path / "models" / "m-run.partial" / "ledger.jsonl", [1.5, 1.125], partial_tail='{"step": 2, "tea')
    (tmp_path / "models" / "m-start.partial").mkdir()  # staging made, no step finished yet
    _ledger(tmp_path / "models" / "m-start.partial" / "ledger.jsonl", [])
    rows = student_statuses(run, ["m-done", "m-run", "m-start", "m-wait"], {"m-run": 8, "m-start": 8})
    assert [(r.model_id, r.state, r.steps_done, r.n_steps, r.teacher_kl) for r in rows] == [
        ("m-done", "done", 3, None, 0.25),
        ("m-run", "running", 2, 8, 1.125),
        ("m-start", "running", 0, 8, None),
        ("m-wait", "waiting", 0, None, None),
    ]
    assert running_line(rows) == "m-run step 2/8 KL 1.125 | m-start step 0/8 KL -"
    assert read_ledger(tmp_path / "missing.jsonl") == (0, None)


def test_stage_bar_counts_jobs_and_shows_the_detail(capsys):
    bar = StageProgress("students", 5, detail=lambda: "m0 step 1/2 KL 0.500")
    bar.update(2, 2, 1)
    assert bar.bar.n == 3 and bar.last == (2, 2, 1)
    assert bar.bar.postfix == "running 2 failed 1 | m0 step 1/2 KL 0.500"
    bar.close()
    quiet = StageProgress("signals", 3, detail=lambda: 1 / 0, enabled=False)  # disabled: detail never read
    quiet.update(1, 0, 0)
    quiet.close()


def test_a_killed_runs_staging_ledger_is_not_shown_as_running(tmp_path):
    """Bug: after a restart every student whose job had not started yet showed the killed run's last step from its
    leftover models/<id>.partial/ledger.jsonl. A ledger last written before the stage started is 'waiting'."""
    import os

    run = RunDir(tmp_path)
    stale = tmp_path / "models" / "m-old.partial" / "ledger.jsonl"
    _ledger(stale, [1.5, 1.25, 1.0])
    os.utime(stale, (1000.0, 1000.0))  # written by the killed run, long before this stage started
    fresh = tmp_path / "models" / "m-new.partial" / "ledger.jsonl"
    _ledger(fresh, [0.75])
    os.utime(fresh, (2000.0, 2000.0))
    rows = student_statuses(run, ["m-old", "m-new"], {"m-old": 18, "m-new": 18}, since=1500.0)
    assert [(r.model_id, r.state, r.steps_done, r.teacher_kl) for r in rows] == [
        ("m-old", "waiting", 0, None), ("m-new", "running", 1, 0.75)]
    assert running_line(rows) == "m-new step 1/18 KL 0.750"
    # without `since` (a caller that does not know when the stage began) both count, as before
    assert [r.state for r in student_statuses(run, ["m-old", "m-new"])] == ["running", "running"]


def test_a_study_draws_bars_only_on_a_terminal(tmp_path, tiny_model_dir, monkeypatch):
    """progress=None (the CLI's): bars when stderr is a terminal, none in a log file (no escape codes there)."""
    import io
    import sys

    from conftest import tiny_study_config
    from leakaudit.study import Study

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    cfg = tiny_study_config(tmp_path, tiny_model_dir)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert Study(cfg, log=lambda m: None).progress is False
    monkeypatch.setattr(sys, "stderr", Tty())
    assert Study(cfg, log=lambda m: None).progress is True
    assert Study(cfg, log=lambda m: None, progress=False).progress is False
