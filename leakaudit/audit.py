"""`leakaudit audit`: the auditor's question about one deployed student, run as a study.

The auditor holds a deployed student (the target), candidate records (was each one in its teacher's
privileged data?), and population records from the same distribution known to be outside it. An audit is a
study (leakaudit.study.Study) whose config has an `audit` section: the target is given, and the plan is the
`disjoint` design, whose references are either given (students trained without any candidate) or trained here
on population records with the study's OPD recipe. Same stages, same assembler, same resume checks: an audit
directory that holds another target, other candidates or another recipe is refused (config hash, records
hash, model digests), never silently reused.

Run directory: the study layout plus `candidates.csv` (one row per candidate, one column per attack, higher =
more likely a member) and `audit.json`. Labels, when every candidate carries `meta.is_member`, turn the scores
into metrics and a report.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from leakaudit.config import AuditConfig, StudyConfig, load_config

AUDIT_DEFAULTS = ("teacher.kind=self",)
"""Settings an audit starts from before the user's own: its references self-distil from the frozen base unless
the config or --set says otherwise (an audit has no teacher-only records to prepare a teacher on)."""


@dataclass
class AuditRequest:
    target: str
    candidates: Path
    population: Path | None = None
    references: list[str] = field(default_factory=list)
    n_train_references: int = 4
    base_model: str | None = None
    """What the target was initialised from; None = the config's base_model."""
    out: Path = Path("runs/audit")
    overrides: list[str] = field(default_factory=list)
    """`--set` overrides applied on top of the preset (training.*, signals.*, attacks, metrics.*, seed)."""
    config: Path | None = None
    """A study config whose recipe (training, teacher, signals, attacks) the references use."""
    preset: str | None = None
    redact: bool = False


def audit_config(req: AuditRequest) -> StudyConfig:
    """The study config of an audit: preset (default 'default') < AUDIT_DEFAULTS (only without a --config file,
    whose recipe is taken as it is) < --config file < --set, with the audit section and the run directory from
    the request."""
    defaults = AUDIT_DEFAULTS if req.config is None else ()
    cfg = load_config(req.config, preset=req.preset, overrides=[*defaults, *req.overrides])
    out = Path(req.out)
    audit = AuditConfig(target=str(req.target), candidates=str(req.candidates),
                        population=str(req.population) if req.population else None,
                        references=[str(r) for r in req.references], n_references=req.n_train_references)
    return dataclasses.replace(cfg, audit=audit, base_model=req.base_model or cfg.base_model, name=out.name,
                               out_root=str(out.parent))


def run_audit(req: AuditRequest, *, log: Callable[[str], None] = print, progress: bool = True) -> Path:
    """Run (or resume) an audit; returns the path of candidates.csv."""
    from leakaudit.study import Study

    study = Study(audit_config(req), log=log, progress=progress, redact=req.redact)
    study.run_all()
    return study.run.candidates_csv
