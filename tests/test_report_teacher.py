"""The report names the run's teacher and shows how literal it was ("every run's report names which
teacher it used and measures how literal it was"): hand-made teacher_literalness.json / sample_literalness.json /
models/_teacher/meta.json with known values over the synthetic run of tests/fake_run.py -> exact strings in
report.html, metrics.json and the text the CLI prints; runs made before the files existed say "not measured"."""

from __future__ import annotations

import json

import pytest

from fake_run import write_fake_literalness, write_fake_run
from leakaudit.io import write_json
from leakaudit.report import build_report, literalness_tables, teacher_info
from leakaudit.rundir import RunDir


def _run(tmp_path, *, kind="restated", teacher=True, samples=True, meta=True):
    return write_fake_literalness(write_fake_run(tmp_path / "run"), kind=kind, teacher=teacher, samples=samples,
                                  meta=meta)


def _section(page: str) -> str:
    start = page.index('<section id="teacher">')
    return page[start:page.index("</section>", start)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = _run(tmp_path_factory.mktemp("measured"))
    build_report(root, n_boot=50, seed=0, n_perm=0)
    return root


def test_report_names_a_restated_teacher_and_the_records_it_was_prepared_on(measured):
    sec = _section((measured / "report.html").read_text())
    assert "<h2>Teacher and literalness</h2>" in sec
    assert ("Teacher: restated (non-copying: the base fine-tuned to answer from its context in another surface "
            "form (leakaudit.data.restate)); prepared on 18 records (never a candidate) of 20 given, 2 left out "
            "(no restatement rule).") in sec
    assert "Students distilled from: models/_teacher." in sec


def test_report_shows_the_teachers_log_p_with_and_without_context(measured):
    sec = _section((measured / "report.html").read_text())
    assert ("Teacher log p per token of the privileged text: -0.005 with context vs -0.317 without (mean over 3 "
            "candidates).") in sec
    # per-domain rows as the file holds them, and the all-candidates row (mean over per_record)
    for cell in ("<td>math</td>", "<td>-0.002</td>", "<td>-0.375</td>", "<td>-0.700</td>", "<td>code</td>",
                 "<td>-0.010</td>", "<td>-0.200</td>", "<td>all</td>", "<td>-0.005</td>", "<td>-0.317</td>",
                 "<td>0.312</td>"):  # gain over all: -0.004733 - (-0.316667)
        assert cell in sec, cell
    assert "<th>log p privileged, with context</th>" in sec and "<th>log p privileged, without context</th>" in sec


def test_report_shows_sample_similarity_members_vs_non_members_per_target_and_pooled(measured):
    sec = _section((measured / "report.html").read_text())
    assert ("Similarity of the target samples to the privileged text: members 0.581 vs non-members 0.410, "
            "AUROC 0.766 (pooled over 2 real targets).") in sec
    for cell in ("<td>math-0</td>", "<td>0.612</td>", "<td>0.401</td>", "<td>0.812</td>",
                 "<td>code-0</td>", "<td>0.550</td>", "<td>0.419</td>", "<td>0.719</td>",
                 "<td>null-math</td>", "<td>pooled (2 real targets)</td>", "<td>0.581</td>", "<td>0.410</td>",
                 "<td>0.766</td>"):
        assert cell in sec, cell
    assert "<th>similarity, members</th>" in sec and "<th>similarity, non-members</th>" in sec
    assert "not measured" not in sec


def test_metrics_json_carries_the_teacher_and_the_literalness_summary(measured):
    meta = json.loads((measured / "metrics.json").read_text())
    t = meta["teacher"]
    assert (t["kind"], t["model"], t["n_records"], t["n_records_given"], t["n_left_out"], t["source"]) == (
        "restated", "models/_teacher", 18, 20, 2, "models/_teacher/meta.json")
    lit = meta["literalness"]
    assert lit["measured"] == {"teacher": True, "samples": True}
    assert lit["teacher"]["candidates"] == 3
    assert lit["teacher"]["with_context"] == pytest.approx(-0.0142 / 3)
    assert lit["teacher"]["without_context"] == pytest.approx(-0.95 / 3)
    assert lit["samples"] == {"n_targets": 2, "members": 0.5811, "non_members": 0.4102, "auroc": 0.7656,
                              "all": pytest.approx(0.4957, abs=1e-4)}


def test_cli_prints_teacher_and_literalness_under_the_blind_check(measured, capsys):
    from leakaudit.cli_summary import print_headline

    print_headline(measured)
    out = capsys.readouterr().out
    blind = out.index("Blind text baseline")
    teacher = out.index("Teacher: restated (non-copying")
    assert blind < teacher
    assert "prepared on 18 records (never a candidate) of 20 given, 2 left out" in out[teacher:]
    assert "-0.005 with context vs -0.317 without (mean over 3 candidates)" in out[teacher:]
    assert "members 0.581 vs non-members 0.410, AUROC 0.766 (pooled over 2 real targets)" in out[teacher:]


def test_a_run_made_before_the_measurements_says_not_measured_and_still_names_its_teacher(tmp_path, capsys):
    """No literalness files (a run finished before they were written): the kind comes from study.yaml and the
    count from the prepared teacher's meta.json."""
    root = _run(tmp_path, kind="prepared", teacher=False, samples=False)
    write_json(RunDir(root).teacher / "meta.json", {"kind": "privileged_teacher", "n_records": 104,
                                                    "n_records_given": 104})
    build_report(root, n_boot=50, seed=0, n_perm=0)
    sec = _section((root / "report.html").read_text())
    assert ("Teacher: prepared (copying: the base fine-tuned to reproduce the privileged text from its context); "
            "prepared on 104 records (never a candidate).") in sec
    assert "Literalness: not measured in this run" in sec and "<table" not in sec
    meta = json.loads((root / "metrics.json").read_text())
    assert meta["literalness"] == {"measured": {"teacher": False, "samples": False}, "teacher": None,
                                   "samples": None}
    from leakaudit.cli_summary import print_headline

    print_headline(root)
    out = capsys.readouterr().out
    assert "Teacher: prepared (copying" in out and "Literalness: not measured in this run." in out


def test_one_file_missing_says_which_measurement_is_not_measured(tmp_path):
    root = _run(tmp_path, teacher=False, meta=False)
    build_report(root, n_boot=50, seed=0, n_perm=0)
    sec = _section((root / "report.html").read_text())
    assert "Teacher log p of the privileged text: not measured in this run" in sec
    assert "members 0.581 vs non-members 0.410, AUROC 0.766" in sec
    # restated by study.yaml, but neither meta.json nor teacher_literalness.json has the count
    assert "prepared on an unrecorded number of records" in sec


@pytest.mark.parametrize("kind, phrase", [
    ("self", "Teacher: self (self-distillation: the frozen base student)."),
    ("org/big-teacher", "Teacher: org/big-teacher (a model reference: hub id or directory)."),
])
def test_self_and_model_reference_teachers_are_named(tmp_path, kind, phrase):
    root = _run(tmp_path, kind=kind, teacher=False, samples=False, meta=False)
    info = teacher_info(root)
    assert info["kind"] == kind and not info["prepared"] and info["n_records"] is None
    build_report(root, n_boot=50, seed=0, n_perm=0)
    sec = _section((root / "report.html").read_text())
    assert phrase in sec and "not measured in this run" in sec
    tables = literalness_tables(root)
    assert tables["teacher_table"] is None and tables["lines"][0] == phrase


def test_the_count_falls_back_to_teacher_literalness_json_without_meta_json(tmp_path):
    root = _run(tmp_path, meta=False)
    info = teacher_info(root)
    assert (info["n_records"], info["n_records_given"], info["n_left_out"], info["source"]) == (
        18, 20, 2, "teacher_literalness.json")


def test_redacted_report_keeps_the_section(tmp_path):
    root = _run(tmp_path)
    build_report(root, n_boot=50, seed=0, n_perm=0, redact=True)
    sec = _section((root / "report.html").read_text())
    assert "-0.005 with context vs -0.317 without" in sec and "Teacher: restated" in sec
