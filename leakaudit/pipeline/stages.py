"""The stage list, what each stage writes, and which stages `--force` redoes.

A run's stages run in STAGES order; each one's outputs (`stage_outputs`) are what its marker hashes
(leakaudit.stage_marks) and what --force removes. The list is one for every design: a file a design does not write
(candidates.csv in a study) is hashed as absent, so the markers of every run made so far still match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from leakaudit.errors import ConfigError
from leakaudit.rundir import NULL_SCORES_FILE, RunDir

STAGES = ("records", "plan", "teacher", "students", "signals", "attacks", "report")
REBUILT_WHEN_CHANGED = ("report",)
"""Stages whose outputs are presentation only, derived from earlier outputs: when they no longer match their
marker (`leakaudit report --redact` rebuilt them) they are rebuilt instead of refused."""


def force_from(force: Iterable[str]) -> int:
    """The index of the first stage to redo for `--force` (STAGES' length: none); 'all' is the first stage.
    ConfigError naming an unknown stage."""
    force = set(force)
    unknown = force - set(STAGES) - {"all"}
    if unknown:
        raise ConfigError(f"--force: unknown stages {sorted(unknown)}; stages are {list(STAGES)} or 'all'")
    if "all" in force:
        force = set(STAGES)
    return min((STAGES.index(s) for s in force), default=len(STAGES))


def stage_outputs(run: RunDir, stage: str, planned_models: list[str]) -> list[Path]:
    """Files and directories `stage` writes in `run`; `planned_models`: the models the plan trains (the students
    stage's outputs besides every model directory found)."""
    if stage == "students":
        models = run.root / "models"
        # hidden files (the teacher's lock, leakaudit.locks) are no model's: --force students must not delete
        # a lock another process may hold
        existing = ([p for p in models.glob("*") if p != run.teacher and not p.name.startswith(".")]
                    if models.is_dir() else [])
        return sorted(set(existing) | {run.model(m) for m in planned_models})
    # the literalness files count only where they exist: a run finished before they were written keeps the
    # output digest its markers hold (a deleted file is still noticed: the marker was written with it)
    since = {"teacher": [run.teacher_literalness], "report": [run.realism],
             "attacks": [run.sample_literalness, run.root / NULL_SCORES_FILE]}
    return {
        "records": [run.records, run.teacher_records],
        "plan": [run.membership, run.plan_dir / "plan.json"],
        "teacher": [run.teacher],
        "signals": [run.root / "signals"],
        "attacks": [run.scores, run.leak_map, run.candidates_csv, run.audit_json],
        "report": [run.metrics_json, run.metrics_csv, run.blind_text_null, run.plots, run.report_html],
    }[stage] + [p for p in since.get(stage, []) if p.exists()]
