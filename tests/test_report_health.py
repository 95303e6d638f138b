"""The report's training check: students whose teacher KL ended above where it started are flagged."""

from __future__ import annotations

import json

import pytest

from fake_run import write_fake_run
from leakaudit.errors import InputError
from leakaudit.io import mark_done
from leakaudit.report import build_report
from leakaudit.report.health import ledger_kl, training_health


def _ledger(directory, kls, *, shuffle=False, done=True):
    """A model folder with a ledger of these per-step KLs (and its DONE marker unless `done` is False)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"step": i, "loss": 0.0, "teacher_kl": kl} for i, kl in enumerate(kls)]
    if shuffle:
        rows = rows[::-1]
    (directory / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if done:
        mark_done(directory)


def test_training_health_golden_values(tmp_path):
    models = tmp_path / "models"
    _ledger(models / "code-s0", [1.2, 0.8, 0.5, 0.3, 0.2])
    _ledger(models / "code-null", [1.26, 0.9, 1.5, 1.8, 1.9], shuffle=True)  # order comes from "step"
    _ledger(models / "_teacher", [5.0, 9.0])                                 # the teacher is not a student
    mark_done(models / "code-s1")                                             # no ledger: skipped
    _ledger(models / "code-s2", [0.9, 0.5], done=False)                        # killed before DONE: skipped
    _ledger(models / "code-s3.partial", [0.9, 0.5], done=False)                # a model in training and its
    _ledger(models / "code-s3.ckpt", [0.9, 0.5])                               # checkpoint: not models
    rows = {r["model_id"]: r for r in training_health(models)}
    assert set(rows) == {"code-s0", "code-null"}
    assert rows["code-s0"] == {"model_id": "code-s0", "steps": 5, "kl_first": 1.2, "kl_min": 0.2,
                               "kl_last": pytest.approx((0.5 + 0.3 + 0.2) / 3, abs=1e-4),
                               "moved_toward_teacher": True}
    assert rows["code-null"]["kl_first"] == 1.26 and rows["code-null"]["kl_min"] == 0.9
    assert rows["code-null"]["kl_last"] == pytest.approx((1.5 + 1.8 + 1.9) / 3, abs=1e-4)
    assert rows["code-null"]["moved_toward_teacher"] is False
    assert training_health(tmp_path / "absent") == []


def test_bad_ledger_line_names_file_and_line(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"step": 0, "teacher_kl": 1.0}\n{not json\n')
    with pytest.raises(InputError) as e:
        ledger_kl(path)
    assert "ledger.jsonl" in str(e.value) and "2" in str(e.value)


def test_report_flags_a_student_that_moved_away_from_its_teacher(tmp_path):
    root = write_fake_run(tmp_path / "study")
    _ledger(root / "models" / "code-s0", [1.2, 0.4, 0.1, 0.1])
    _ledger(root / "models" / "code-null", [1.2, 1.5, 1.8, 1.9])
    html = build_report(root, n_boot=50).read_text()
    assert "1 of 2 students ended FURTHER from their teacher than they started (code-null)" in html
    health = json.loads((root / "metrics.json").read_text())["training_health"]
    assert [(r["model_id"], r["moved_toward_teacher"]) for r in health] == [("code-null", False), ("code-s0", True)]
    _ledger(root / "models" / "code-null", [1.2, 0.5, 0.4, 0.3])
    assert "Every one of the 2 students ended closer" in build_report(root, n_boot=50).read_text()
