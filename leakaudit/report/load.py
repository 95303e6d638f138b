"""Read a finished run directory into DataFrames (for build_report and the notebooks)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from leakaudit.errors import InputError
from leakaudit.io import read_json, read_parquet
from leakaudit.metrics import normalise_scores
from leakaudit.report.leakmap import validate_leak_map
from leakaudit.rundir import RunDir
from leakaudit.yamlio import read_yaml


@dataclass
class RunData:
    """What a run directory holds for analysis; optional parts are empty dicts / None when absent."""

    root: Path
    scores: pd.DataFrame                      # normalised scores.parquet (+ family, null_check, label)
    config: dict = field(default_factory=dict)  # study.yaml
    env: dict = field(default_factory=dict)     # env.json
    leak_map: dict | None = None              # leak_map.json (see leakaudit.report.leakmap)
    metrics: pd.DataFrame | None = None       # metrics.csv when the report was already built

    @property
    def labelled(self) -> pd.DataFrame:
        """Score rows with a known membership label (all rows in a study; maybe none in an audit)."""
        return self.scores[self.scores["is_member"].notna()]

    @property
    def real(self) -> pd.DataFrame:
        """Labelled rows of real targets (null-check targets left out)."""
        lab = self.labelled
        return lab[~lab["null_check"]]


def read_scores(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A run's scores.parquet (only `columns` when given); unreadable: InputError naming it (leakaudit.io)."""
    return read_parquet(path, columns=columns, what="scores table")


def load_run(run_dir: str | Path) -> RunData:
    """Load scores.parquet (required) and study.yaml, env.json, leak_map.json, metrics.csv when present."""
    run = RunDir(Path(run_dir))
    if not run.scores.is_file():
        raise InputError("no scores.parquet: run the attacks stage first", path=str(run.scores))
    scores = normalise_scores(read_scores(run.scores))
    config = {}
    if run.config.is_file():
        config = read_yaml(run.config) or {}
    env = read_json(run.env) if run.env.is_file() else {}
    leak_map = validate_leak_map(read_json(run.leak_map), path=str(run.leak_map)) if run.leak_map.is_file() else None
    metrics = pd.read_csv(run.metrics_csv) if run.metrics_csv.is_file() else None
    return RunData(run.root, scores, config, env, leak_map, metrics)


def candidate_table(scores: pd.DataFrame, *, sort_by: str = "leaky") -> pd.DataFrame:
    """One row per (record_id, target, domain), one score column per attack label, is_member when known;
    sorted by `sort_by` (highest = most likely member first) when that column exists."""
    df = scores if "label" in scores else normalise_scores(scores)
    wide = df.pivot_table(index=["record_id", "target", "domain"], columns="label", values="score",
                          aggfunc="first", dropna=False).reset_index()
    wide.columns.name = None
    labels = df.groupby(["record_id", "target", "domain"])["is_member"].first().reset_index()
    if labels["is_member"].notna().any():
        wide = wide.merge(labels, on=["record_id", "target", "domain"], how="left")
    if sort_by in wide:
        wide = wide.sort_values(sort_by, ascending=False, na_position="last")
    return wide.reset_index(drop=True)


def read_records_texts(run_dir: str | Path) -> dict[str, str] | None:
    """record_id -> `privileged` text of records.jsonl (what blind_text saw), or None when it is absent."""
    path = RunDir(Path(run_dir)).records
    if not path.is_file():
        return None
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                out[str(row.get("record_id", ""))] = str(row.get("privileged", ""))
    return out


def read_records_privileged(run_dir: str | Path) -> list[str]:
    """The `privileged` texts of records.jsonl (empty when absent), for redaction."""
    path = RunDir(Path(run_dir)).records
    if not path.is_file():
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(str(json.loads(line).get("privileged", "")))
    return out
