"""Paths inside a run directory (see docs/architecture.md, "A run directory"); one place that knows the layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunDir:
    """A study or audit run directory. All paths are derived; nothing is created on construction."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / "study.yaml"

    @property
    def env(self) -> Path:
        return self.root / "env.json"

    @property
    def records(self) -> Path:
        return self.root / "records.jsonl"

    @property
    def teacher_records(self) -> Path:
        """Records set aside for preparing the teacher only (written before records.jsonl)."""
        return self.root / "teacher_records.jsonl"

    @property
    def plan_dir(self) -> Path:
        """Holds membership.parquet and plan.json."""
        return self.root

    @property
    def membership(self) -> Path:
        return self.root / "membership.parquet"

    def model(self, model_id: str) -> Path:
        return self.root / "models" / model_id

    @property
    def teacher(self) -> Path:
        """A teacher prepared on population records (optional stage)."""
        return self.root / "models" / "_teacher"

    @property
    def teacher_literalness(self) -> Path:
        """Teacher stage: the teacher's log p of the privileged text with vs without context (leakaudit.literalness)."""
        return self.root / "teacher_literalness.json"

    @property
    def sample_literalness(self) -> Path:
        """Attacks stage: similarity of the targets' fresh samples to the privileged text (leakaudit.literalness)."""
        return self.root / "sample_literalness.json"

    def fresh(self, target: str) -> Path:
        return self.root / "signals" / "fresh" / target

    def fixed(self, model_id: str) -> Path:
        return self.root / "signals" / "fixed" / f"{model_id}.npz"

    @property
    def scores(self) -> Path:
        return self.root / "scores.parquet"

    @property
    def metrics_json(self) -> Path:
        return self.root / "metrics.json"

    @property
    def metrics_csv(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def blind_text_null(self) -> Path:
        """The blind text baseline's permutation null per level (csv; leakaudit.report.blind_null)."""
        return self.root / "blind_text_null.csv"

    @property
    def realism(self) -> Path:
        """Report stage: the targets' realism card (training-set size and passes, base -> target KL, task quality,
        sample entropy; leakaudit.realism)."""
        return self.root / "realism.json"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def report_html(self) -> Path:
        return self.root / "report.html"

    @property
    def candidates_csv(self) -> Path:
        """Audits: one row per candidate, one column per attack."""
        return self.root / "candidates.csv"

    @property
    def audit_json(self) -> Path:
        """Audits: what was audited, with which references and recipe."""
        return self.root / "audit.json"

    @property
    def leak_map(self) -> Path:
        """Per-token gaps of the fresh trajectories of one leaking record, for the token-level view (json)."""
        return self.root / "leak_map.json"
