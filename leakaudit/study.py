"""The entry point of a run: the design its config describes (`design_for`), and `Study`, the runner of that design.

run-study, `leakaudit plan`, `leakaudit train`, the tests, the notebooks and the bench scripts start a run here;
`leakaudit audit` builds its runner with the audit's design directly (leakaudit.cli). The work is done in
leakaudit.pipeline: the runner (stages, marks, resume), the two designs, the stage modules and the jobs.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Iterable

from leakaudit.config import StudyConfig
from leakaudit.pipeline import signals_stage, training
from leakaudit.pipeline.audit_design import DisjointAuditDesign
from leakaudit.pipeline.design import Design, unique_by_id
from leakaudit.pipeline.runner import Runner
from leakaudit.pipeline.stages import STAGES
from leakaudit.pipeline.study_design import KeepMatrixDesign

__all__ = ["STAGES", "Study", "design_for", "unique_by_id"]


def design_for(cfg: StudyConfig, recipe_sources: dict[str, str] | None = None) -> Design:
    """The design a config describes: the disjoint audit when it has an `audit` section (`recipe_sources`: where its
    references' recipe came from, leakaudit.audit.recipe_sources), else the keep-matrix study."""
    if cfg.audit is not None:
        return DisjointAuditDesign(recipe_sources)
    return KeepMatrixDesign()


class Study(Runner):
    """The runner of the design `cfg` describes, with one call per job for scripts that run one by hand."""

    def __init__(self, cfg: StudyConfig, *, force: Iterable[str] = (), log: Callable[[str], None] = print,
                 progress: bool | None = None, redact: bool = False, recipe_sources: dict[str, str] | None = None):
        super().__init__(cfg, design_for(cfg, recipe_sources), force=force, log=log, progress=progress,
                         redact=redact)

    def train_one(self, model_id: str, step_hook: Callable[[dict], None] | None = None,
                  epoch_hook: Callable[[int, Any], None] | None = None) -> None:
        """leakaudit.pipeline.training.train_one on this run (experiments/pass_curve.py's epoch hook)."""
        training.train_one(self.ctx, model_id, step_hook=step_hook, epoch_hook=epoch_hook)

    def sample_one(self, target: str) -> None:
        """leakaudit.pipeline.signals_stage.sample_one on this run."""
        signals_stage.sample_one(self.ctx, target)

    def score_one(self, model_id: str, fixed: bool, fresh: list) -> None:
        """leakaudit.pipeline.signals_stage.score_one on this run."""
        signals_stage.score_one(self.ctx, model_id, fixed, fresh)

    def open_backend(self, model_id: str) -> ContextManager[Any]:
        """The signals backend of one model of this run (bench/bench_score_sharing.py times the scoring paths)."""
        return self.ctx.open_backend(model_id)

    _backend = open_backend  # the name bench/bench_score_sharing.py calls
