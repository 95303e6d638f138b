"""The notebooks execute top to bottom against the synthetic run directory (nbclient, real kernel)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

from fake_run import write_fake_literalness, write_fake_run

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run_notebook(name: str, run_dir: Path, monkeypatch) -> nbformat.NotebookNode:
    monkeypatch.setenv("LEAKAUDIT_RUN", str(run_dir))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS.parent)}}).execute()
    return nb


def outputs(nb, kind: str) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == kind]


def texts(nb) -> str:
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            parts.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    return write_fake_run(tmp_path_factory.mktemp("nb") / "study")


def test_explore_study_runs_and_shows_tables_and_figures(fake_run, monkeypatch):
    nb = run_notebook("explore_study.ipynb", fake_run, monkeypatch)
    assert not outputs(nb, "error")
    text = texts(nb)
    assert "best OUT-only baseline" in text and "math-0" in text
    assert "mean per-target AUROC [95% CI]" in text and "Δ Leaky − this [95% CI]" in text  # the paired headline
    # the blind text check (fake scores are not blind_text's own, so its null is not computed: the CI rule)
    assert "Blind text baseline consistent with no text difference" in text and "CI rule" in text
    # the teacher cell: the synthetic run predates the literalness files (and its study.yaml names no teacher)
    assert "Teacher: self (self-distillation" in text and "Literalness: not measured in this run." in text
    pngs = [o for o in outputs(nb, "display_data") if "image/png" in o["data"]]
    assert len(pngs) == 4  # AUROC bars, ROC math, ROC code, leak map


def test_explore_study_shows_the_teacher_and_its_literalness(tmp_path, monkeypatch):
    root = write_fake_literalness(write_fake_run(tmp_path / "study"))
    nb = run_notebook("explore_study.ipynb", root, monkeypatch)
    assert not outputs(nb, "error")
    text = texts(nb)
    assert "Teacher: restated (non-copying" in text and "prepared on 18 records" in text
    assert "-0.005 with context vs -0.317 without (mean over 3 candidates)" in text
    assert "members 0.581 vs non-members 0.410, AUROC 0.766 (pooled over 2 real targets)" in text
    assert "pooled (2 real targets)" in text and "log p privileged, with context" in text  # both tables shown


@pytest.mark.heavy  # the tiny study of the session (a whole extra study in this file's worker)
def test_explore_study_runs_on_a_real_tiny_study(tiny_study_run, monkeypatch):
    """The notebook against a run the pipeline made (the tiny preset on the tiny model), not the synthetic one."""
    _, root = tiny_study_run
    nb = run_notebook("explore_study.ipynb", root, monkeypatch)
    assert not outputs(nb, "error")
    text = texts(nb)
    assert "mean per-target AUROC [95% CI]" in text and "Leaky" in text
    assert any("image/png" in o["data"] for o in outputs(nb, "display_data"))


def test_audit_student_ranks_candidates_without_labels(tmp_path, monkeypatch):
    root = write_fake_run(tmp_path / "audit")
    scores = pd.read_parquet(root / "scores.parquet")
    scores[scores["target"] == "math-0"].assign(is_member=None).to_parquet(root / "scores.parquet")
    nb = run_notebook("audit_student.ipynb", root, monkeypatch)
    assert not outputs(nb, "error")
    assert "labels: False" in texts(nb) and "ranking only" in texts(nb)


def test_audit_student_shows_metrics_with_labels(fake_run, monkeypatch):
    nb = run_notebook("audit_student.ipynb", fake_run, monkeypatch)
    assert not outputs(nb, "error")
    assert "labels: True" in texts(nb) and "auroc" in texts(nb)


@pytest.mark.parametrize("name, default_of", [("audit_student.ipynb", "audit"), ("explore_study.ipynb", "study")])
def test_each_notebook_reads_its_commands_default_run_directory(name, default_of):
    """Without LEAKAUDIT_RUN the audit notebook reads where `leakaudit audit` writes by default, the study notebook
    where `make study` (the default preset) does."""
    import re
    from dataclasses import fields

    from leakaudit.audit import AuditRequest
    from leakaudit.config import load_config

    source = "\n".join(c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells if c.cell_type == "code")
    found = re.findall(r'os\.environ\.get\("LEAKAUDIT_RUN", "([^"]+)"\)', source)
    want = (next(f.default for f in fields(AuditRequest) if f.name == "out") if default_of == "audit"
            else load_config(preset="default").run_dir)
    assert found == [str(want)]


def test_the_report_guides_python_code_runs_on_a_run_directory(fake_run, capsys):
    """docs/guide/report.md's 'From Python or a notebook' block, run as written on the synthetic run (its path in
    place of runs/default): the headline, the per-target pivot and the ranked candidates print."""
    import re

    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "report.md").read_text(encoding="utf-8")
    section = guide.split("## From Python or a notebook", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    assert 'load_run("runs/default")' in code
    exec(compile(code.replace('"runs/default"', repr(str(fake_run))), "report.md", "exec"), {})  # our own docs
    out = capsys.readouterr().out
    assert "best OUT-only baseline" in out and "mean per-target AUROC [95% CI]" in out
    assert "math-0" in out and "record_id" in out
