"""RunContext: what a stage or a job knows of its run, and nothing more.

The resolved config, the run directory, the targets the run is given (by model id; leakaudit.pipeline.targets),
whether to draw progress bars and where to log. The records, the teacher-only records and the plan are read from
the run directory at their first use, unless the runner's prepare() holds them in memory already (it builds them
before anything is written). A job gets the context as plain data (`job_args`) and rebuilds it in its worker
(`from_job_args`): the config, the given targets and the progress flag travel, models and plans never do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol, Sequence

from leakaudit.assemble import BASE_ID
from leakaudit.config import StudyConfig, validate_config
from leakaudit.data.records import Record, read_jsonl
from leakaudit.executors import Job
from leakaudit.membership import MembershipPlan, stable_seed
from leakaudit.pipeline.targets import ModelTarget, Target, target_from_args
from leakaudit.rundir import RunDir


class JobRunner(Protocol):
    """What a stage that hands out jobs needs of its runner (leakaudit.pipeline.runner.Runner)."""

    def job_args(self, **kwargs: Any) -> dict[str, Any]:
        """A job's plain-data kwargs: the run context's (`RunContext.job_args`) and `kwargs`."""

    def run_jobs(self, stage: str, jobs: Sequence[Job], detail: Callable[[], str] | None = None) -> dict:
        """Run the jobs on the run's executor; JobsFailed naming each failure once all have run."""


@dataclass
class RunContext:
    cfg: StudyConfig
    """The resolved config (bf16_autocast settled, leakaudit.precision): the one the run directory is hashed by."""
    targets: dict[str, Target] = field(default_factory=dict)
    """The targets the run is given rather than trains, by model id (an audit's target; none for a study)."""
    progress: bool = False
    log: Callable[[str], None] = print
    run: RunDir = field(init=False)
    _records: dict[str, Record] | None = field(default=None, init=False, repr=False)
    _teacher_records: list[Record] | None = field(default=None, init=False, repr=False)
    _plan: MembershipPlan | None = field(default=None, init=False, repr=False)
    _tokenizer: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.run = RunDir(self.cfg.run_dir)

    # ---- the run's inputs ----------------------------------------------------------------------------------
    def hold(self, records: dict[str, Record], teacher_records: list[Record], plan: MembershipPlan) -> None:
        """Keep the inputs prepare() built in memory (the records and plan stages write these very objects)."""
        self._records, self._teacher_records, self._plan = records, teacher_records, plan

    def records(self) -> dict[str, Record]:
        """The run's records by id (records.jsonl order)."""
        if self._records is None:
            self._records = {r.record_id: r for r in read_jsonl(self.run.records)}
        return self._records

    def teacher_records(self) -> list[Record]:
        """The records set aside for preparing the teacher (teacher_records.jsonl; none when absent)."""
        if self._teacher_records is None:
            path = self.run.teacher_records
            self._teacher_records = read_jsonl(path) if path.is_file() else []
        return self._teacher_records

    def plan(self) -> MembershipPlan:
        if self._plan is None:
            self._plan = MembershipPlan.load(self.run.plan_dir)
        return self._plan

    def has_plan(self) -> bool:
        """Whether a plan is known: held in memory, or saved by the plan stage."""
        return self._plan is not None or self.run.membership.is_file()

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from leakaudit.models import load_tokenizer

            self._tokenizer = load_tokenizer(self.cfg.base_model, trust_remote_code=self.cfg.trust_remote_code)
        return self._tokenizer

    def stage_seed(self, *parts: object) -> int:
        """A per-stage, per-model seed derived from the master seed (recorded wherever it is used)."""
        return stable_seed(self.cfg.seed, *parts) % (2**31 - 1)

    # ---- models ----------------------------------------------------------------------------------------------
    def model_ref(self, model_id: str) -> str:
        """The model reference `model_id` loads from: the base, a given target, a given reference (its plan
        path) or models/<model_id> of this run."""
        if model_id == BASE_ID:
            return self.cfg.base_model
        given = self.targets.get(model_id)
        if given is not None:
            if given.ref is None:
                raise ValueError(f"{model_id} is an endpoint, not a model reference")
            return given.ref
        return self.plan().models.get(model_id, {}).get("path") or str(self.run.model(model_id))

    def target(self, model_id: str) -> Target:
        """The model as a target (sampled, scored): a given one, else a model this run loads."""
        return self.targets.get(model_id) or ModelTarget(model_id, self.model_ref(model_id))

    def open_backend(self, model_id: str) -> ContextManager[Any]:
        """The signals backend of `model_id` as a target (a model, or an endpoint), for one block."""
        return self.target(model_id).open_backend(self.cfg, self.run, lambda: self.tokenizer)

    def teacher_model(self) -> str | None:
        """The students' teacher: None = the frozen base (self-distillation), the prepared teacher's directory, or
        the model reference teacher.kind names."""
        teacher = self.cfg.teacher
        if teacher.kind == "self":
            return None
        return str(self.run.teacher) if teacher.prepared else teacher.kind

    # ---- as plain data, for jobs ---------------------------------------------------------------------------
    def job_args(self, *, progress: bool) -> dict[str, Any]:
        """The context as a job carries it: the resolved config with an absolute out_root, the given targets, and
        whether the job draws its own progress bars."""
        config = self.cfg.to_dict()
        config["out_root"] = str(Path(self.cfg.out_root).resolve())
        return {"config": config, "targets": {m: t.to_args() for m, t in self.targets.items()}, "progress": progress}

    @classmethod
    def from_job_args(cls, args: dict[str, Any], log: Callable[[str], None] = print) -> "RunContext":
        cfg = validate_config(args["config"])
        targets = {m: target_from_args(a, cfg) for m, a in args["targets"].items()}
        return cls(cfg, targets=targets, progress=bool(args["progress"]), log=log)
