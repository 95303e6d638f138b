"""The documentation: the config reference page is generated from the config dataclasses and kept current."""

from __future__ import annotations

import re
from pathlib import Path

from leakaudit import config_reference
from leakaudit.config import StudyConfig

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def test_the_committed_config_reference_is_what_the_dataclasses_generate():
    """`make docs` regenerates it; a field added or reworded without regenerating the page fails here."""
    assert (DOCS / "guide" / "config-reference.md").read_text() == config_reference.markdown()


def test_every_config_key_is_documented():
    """Every key of a study config, nested sections included, has the docstring its page row shows."""
    rows = config_reference.rows(StudyConfig)
    keys = {key for key, _, _ in rows}
    # nested sections are reached: a key of each
    assert {"data.n_candidates", "data.domains.<name>.source", "training.learning_rate", "teacher.prep.epochs",
            "signals.sampling.n_per_record", "attacks[].params", "audit.api_key_env", "execution.local_workers"} <= keys
    sections = {key for key, default, _ in rows if default == "(section)"}
    missing = [key for key, default, doc in rows if not doc and key not in sections]
    assert missing == []


def test_field_docs_reads_the_string_under_each_field_and_inherits_bases():
    from dataclasses import dataclass

    @dataclass
    class Base:
        a: int = 1
        """A's text."""

    @dataclass
    class Child(Base):
        b: int = 2
        c: int = 3
        """C's text,
        on two lines."""

    assert config_reference.field_docs(Child) == {"a": "A's text.", "c": "C's text,\non two lines."}


def test_every_relative_link_and_image_of_the_readme_exists():
    """The README is read on its own (not built by mkdocs --strict): its links into docs/ must not dangle."""
    text = (REPO / "README.md").read_text()
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert "docs/results.md" in targets and "docs/img/report.png" in targets
    assert [t for t in targets if not (REPO / t).exists()] == []


def test_results_index_lists_every_kept_run_and_names_only_tables_that_exist():
    """results/index.md: one row per folder of results/, each naming the delimited tables it feeds
    (`<!-- table:NAME -->` blocks of docs/results.md and the README), and every such table fed by some run."""
    rows = [line.split("|") for line in (REPO / "results" / "index.md").read_text().splitlines()
            if line.startswith("| `")]
    runs = {cells[1].strip().strip("`"): {t.strip() for t in cells[5].split(",") if t.strip()} for cells in rows}
    assert set(runs) == {p.name for p in (REPO / "results").iterdir() if p.is_dir()}
    for run in runs:  # what a kept run holds, and nothing regenerated from its seed
        files = {p.name for p in (REPO / "results" / run).iterdir()}
        assert files <= {"study.yaml", "scores.parquet", "metrics.json", "metrics.csv", "pool.json",
                         "stage_times.log", "teacher_literalness.json"}, run
    text = (DOCS / "results.md").read_text() + (REPO / "README.md").read_text()
    blocks = re.findall(r"<!-- table:([a-z-]+) -->", text)
    assert len(blocks) == len(set(blocks)) and all(f"<!-- /table:{b} -->" in text for b in blocks)
    assert set().union(*runs.values()) == set(blocks)
