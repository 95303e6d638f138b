"""The runner: a design run through the stages records → plan → teacher → students → signals → attacks → report.

Order of work: `prepare()` loads and checks the whole config and every input in memory (the design's records and
plan, token budgets, model references, the state of an existing run directory) and writes nothing; only then is the
run directory touched. Each stage leaves a marker (leakaudit.stage_marks) with the hash of its inputs and of its
outputs; a stage whose marker matches is skipped, so a crash loses only the stage in flight, and a marker that does
not match (an edited records.jsonl, a target model retrained in place) is an error before anything is written or
deleted. ``force`` names stages to redo; forcing a stage also redoes every later stage. A run directory holding a
different config is refused rather than silently mixed. What a run is made of (records, plan, given models, extra
outputs) is its design's (leakaudit.pipeline.design); the runner knows no design by name.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from leakaudit import stage_marks
from leakaudit.config import StudyConfig, dump_config
from leakaudit.data.records import Record, write_jsonl
from leakaudit.errors import ConfigError, InputError, LeakauditError
from leakaudit.executors import Job, JobsFailed, check_backend, make_executor
from leakaudit.io import write_json, write_text
from leakaudit.locks import run_exclusively
from leakaudit.memory import release_freed_memory, set_allocator_policy
from leakaudit.membership import MembershipPlan
from leakaudit.pipeline import checks, results, signals_stage, teacher_stage, training
from leakaudit.pipeline.context import RunContext
from leakaudit.pipeline.design import Design, trained_models, unique_by_id
from leakaudit.pipeline.stages import REBUILT_WHEN_CHANGED, STAGES, force_from, stage_outputs
from leakaudit.rundir import check_run_root


def _jsonl_bytes(records: list[Record]) -> bytes:
    return "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def write_records(ctx: RunContext) -> None:
    """The records stage: teacher_records.jsonl (when the run sets records aside for the teacher), then
    records.jsonl, which is what later stages read."""
    if ctx.teacher_records():
        write_jsonl(ctx.teacher_records(), ctx.run.teacher_records)
    write_jsonl(list(ctx.records().values()), ctx.run.records)


class Runner:
    """One run directory, its design and its stages. `log` receives one-line progress messages; `progress` draws the
    stage and training bars (None: only when stderr is a terminal, so a log file gets the one-line messages and no
    escape codes); `redact` replaces privileged texts in the report."""

    def __init__(self, cfg: StudyConfig, design: Design, *, force: Iterable[str] = (),
                 log: Callable[[str], None] = print, progress: bool | None = None, redact: bool = False):
        from leakaudit.precision import resolve_study_precision

        # bf16_autocast 'auto' -> true/false on the devices that train, before anything is hashed (leakaudit.precision)
        self.cfg, self.precision = resolve_study_precision(cfg)
        self.design = design
        self.log = log
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.redact = redact
        self.force_from = force_from(force)
        self.ctx = RunContext(self.cfg, targets=design.given_targets(self.cfg), progress=self.progress, log=log)
        self.run = self.ctx.run
        self._todo_from: int | None = None
        self._digests: dict[str, str] = {}
        self._executor = None

    # ---- what the run is made of (read by leakaudit.cost, the CLI and scripts) --------------------------------
    @property
    def is_audit(self) -> bool:
        """Whether the design is the audit's (leakaudit.cost reads it to leave out a study-only cost)."""
        return self.design.kind == "audit"

    @property
    def tokenizer(self) -> Any:
        return self.ctx.tokenizer

    def records(self) -> dict[str, Record]:
        return self.ctx.records()

    def teacher_records(self) -> list[Record]:
        return self.ctx.teacher_records()

    def plan(self) -> MembershipPlan:
        return self.ctx.plan()

    def trained_models(self) -> list[str]:
        return trained_models(self.ctx.plan())

    def fresh_scorers(self, targets: list[str]) -> dict[str, dict[str, list[str] | None]]:
        return signals_stage.fresh_scorers(self.ctx, targets)

    def teacher_sft_records(self) -> tuple[list[Record], list[str]]:
        return teacher_stage.teacher_sft_records(self.ctx)

    # ---- what is left of it, by the run directory (the stages' own decisions; read by a resumed run's ETA) -------
    def teacher_to_prepare(self) -> bool:
        return teacher_stage.teacher_to_prepare(self.ctx)

    def training_left(self) -> dict[str, float]:
        return training.training_left(self.ctx)

    def signals_left(self) -> signals_stage.SignalsLeft:
        return signals_stage.signals_left(self.ctx)

    def external_models(self) -> dict[str, str]:
        """Model references the run reads but does not make, by error key (leakaudit.pipeline.checks.model_ref_key):
        the base, a teacher given by reference, the given targets that are models and the design's given models
        (their content digests are stage inputs)."""
        refs = {"base": self.cfg.base_model}
        if self.cfg.teacher.kind != "self" and not self.cfg.teacher.prepared:
            refs["teacher"] = self.cfg.teacher.kind
        # an endpoint has no content digest (ref None): its URL and model name are in the config
        refs.update({m: t.ref for m, t in self.ctx.targets.items() if t.ref is not None})
        refs.update(self.design.given_models(self.cfg))
        return refs

    def stage_outputs(self, stage: str) -> list[Path]:
        """Files and directories a stage writes (what its marker hashes and --force removes)."""
        planned = trained_models(self.ctx.plan()) if self.ctx.has_plan() else []
        return stage_outputs(self.run, stage, planned)

    # ---- executor and jobs ---------------------------------------------------------------------------------
    @property
    def executor(self) -> Any:
        """The run's executor (leakaudit.executors; cfg.execution), made at first use and kept for the run."""
        if self._executor is None:
            self._executor = make_executor(self.cfg.execution, self.run.root, log=self.log)
        return self._executor

    def close(self) -> None:
        """Release the executor (a Ray instance the run started is shut down)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def job_args(self, **kwargs: Any) -> dict[str, Any]:
        """A job's plain-data kwargs: the run context (a job draws its own progress bars only in this process)."""
        return {"run": self.ctx.job_args(progress=self.progress and self.executor.in_process), **kwargs}

    def run_jobs(self, stage: str, jobs: Sequence[Job], detail: Callable[[], str] | None = None) -> dict:
        """Run a stage's jobs on the run's executor with a progress bar; every failure is logged with its job id and
        error, then JobsFailed (naming each) is raised once all jobs have finished."""
        from leakaudit.progress import StageProgress

        if not jobs:
            return {}
        with StageProgress(stage, len(jobs), detail=detail, enabled=self.progress) as bar:
            out = self.executor.run_jobs(jobs, stage=stage, progress=bar)
        for f in out.failures:
            self.log(f"[{stage}] {f.job_id} failed: {f.error}")
            if f.detail:
                self.log(f.detail.rstrip())
        if out.failures:
            raise JobsFailed(stage, out.failures, len(jobs))
        return out.results

    # ---- the stages ----------------------------------------------------------------------------------------
    def stage_work(self) -> dict[str, Callable[[], None]]:
        """Each stage's work, in STAGES order (no marker: run_all marks each stage once its work is done)."""
        ctx, design = self.ctx, self.design
        work = {"records": lambda: write_records(ctx), "plan": lambda: ctx.plan().save(self.run.plan_dir),
                "teacher": lambda: teacher_stage.run_teacher(ctx), "students": lambda: training.run_students(ctx, self),
                "signals": lambda: signals_stage.run_signals(ctx, self),
                "attacks": lambda: results.run_attacks(ctx, design),
                "report": lambda: results.run_report(ctx, design, redact=self.redact)}
        return work

    def run_stage(self, stage: str) -> None:
        """One stage's work, without its marker (a test or a script running a stage by hand)."""
        if stage not in STAGES:
            raise ConfigError(f"unknown stage {stage!r}; stages are {list(STAGES)}")
        self.stage_work()[stage]()

    def run_all(self, until: str | None = None) -> Path:
        """Validate everything (prepare: nothing written on bad input), then, holding the run directory's lock
        (another process running the same run is refused, exit 2), run the stages not finished earlier; with
        `until` (a stage name), stop after that stage (a later run_all resumes from the next one)."""
        if until is not None and until not in STAGES:
            raise ConfigError(f"until: unknown stage '{until}'; expected one of {list(STAGES)}")
        self.prepare()
        with run_exclusively(self.run.root):
            self._run_stages(until)
        return self.run.root

    def _run_stages(self, until: str | None = None) -> None:
        # freed step-sized blocks stay in the driver for reuse (the teacher's preparation, local jobs); Ray jobs set
        # it in their own processes (executors.call_job)
        set_allocator_policy(self.cfg.execution.allocator)
        for line in self.design.start_lines(self.ctx):
            self.log(line)
        self._write_header()
        eta = self._stage_estimates()
        try:
            for i, stage in enumerate(STAGES):
                if i < self._todo_from:
                    self.log(f"[{stage}] skipped: finished earlier on the same inputs")
                else:
                    if eta and eta[0].get(stage):
                        from leakaudit.cost import duration_text

                        left = sum(eta[0].get(s, 0.0) for s in STAGES[i:])
                        self.log(f"[{stage}] started: about {duration_text(eta[0][stage])} for this stage, "
                                 f"{duration_text(left)} left for the study (rates measured on {eta[1]})")
                    start = time.time()
                    self.run_stage(stage)
                    # the driver's freed working set (the teacher's ~5 GB, bench/results/teacher_memory_release.json)
                    # back to the OS before the next stage's jobs, which may be Ray workers on this machine
                    release_freed_memory()
                    self._mark(stage)
                    self.log(f"[{stage}] done in {time.time() - start:.1f} s")
                if stage == until:  # also when it was skipped: a resumed run_all(until=...) stops there too
                    break
        finally:
            self.close()

    def _stage_estimates(self) -> tuple[dict[str, float], str] | None:
        """leakaudit.cost's per-stage estimate for this machine class, for the ETA lines; None where no stored
        rates match this machine or the estimate cannot be made (it only informs: a run never fails on it)."""
        from leakaudit.cost import estimate_here

        try:
            return estimate_here(self)
        except (LeakauditError, OSError, KeyError, ValueError) as e:
            self.log(f"[eta] no estimate: {e}")
            return None

    # ---- before the first file -----------------------------------------------------------------------------
    def prepare(self, *, start_executor: bool = True) -> None:
        """Load and check everything in memory; write nothing. Raises InputError / ConfigError (exit 2).
        `start_executor=False` (a dry run): the executor is not started (no Ray instance, no worker)."""
        check_run_root(self.run.root)  # new, empty or a run leakaudit made; a writable place
        check_backend(self.cfg.execution)
        checks.check_run_dir_config(self.run, self.cfg, forced_all=self.force_from == 0)
        # first: the records' token budget loads base_model's tokenizer
        checks.check_model_refs(self.cfg, self.external_models(), self.log)
        for target in self.ctx.targets.values():
            target.check(self.cfg)
        inputs = self.design.inputs(self.ctx)
        self.ctx.hold(unique_by_id(inputs.records), inputs.teacher_records, inputs.plan)
        checks.check_paths_inside(self.run, inputs.plan)
        self.design.check_config(self.cfg)
        self._todo_from = self._check_stage_marks()
        if self._todo_from > STAGES.index("plan"):
            checks.check_saved_plan(self.run, inputs.plan)
        if self._todo_from <= STAGES.index("signals"):
            for target in self.ctx.targets.values():
                target.probe(self.cfg, self.ctx.tokenizer)  # before any reference is trained
        if start_executor and self._todo_from <= STAGES.index("signals"):
            # the executor's resources are known only once it runs (Ray: the cluster's GPUs and CPUs): start it now,
            # so a job asking for more than the cluster has is refused before the run's first file, not after the
            # teacher stage (it was: a CPU machine with the default gpus_per_student=1 failed after ~20 minutes)
            try:
                self.executor.start()
            except BaseException:
                self.close()
                raise

    def check_before_training(self) -> None:
        """What `leakaudit train` checks before it trains a model of this run outside run-study: study.yaml is the
        config the run was made with (its recorded hash; an edited one is refused as run-study refuses it), and the
        records and plan stages finished on this run's inputs. Writes nothing."""
        checks.check_run_dir_config(self.run, self.cfg, forced_all=self.force_from == 0)
        if self._check_stage_marks() <= STAGES.index("plan"):
            raise InputError("the run's records and plan stages have not finished; start it with `leakaudit "
                             "run-study` first", path=str(self.run.root))

    # ---- stage marks ---------------------------------------------------------------------------------------
    def _stage_inputs(self, stage: str, upstream: list[str]) -> str:
        """What a stage's results depend on: the config, the records this config gives (recomputed from the
        sources, so a source file changed under a finished run is noticed), the outputs of every earlier stage,
        and the content of models the run reads but does not make."""
        parts: dict[str, Any] = {"stage": stage, "config": self.cfg.hash(), "upstream": upstream}
        if stage == "records":
            records = list(self.records().values())
            parts["records"] = hashlib.sha256(_jsonl_bytes(records) + _jsonl_bytes(self.teacher_records())).hexdigest()
        else:
            parts["models"] = {k: self._model_digest(r) for k, r in sorted(self.external_models().items())}
        if stage == "report":
            parts["redact"] = self.redact
        return stage_marks.inputs_hash(parts)

    def _model_digest(self, ref: str) -> str:
        """Each model's content digest once per run (every stage's inputs hash includes it)."""
        if ref not in self._digests:
            self._digests[ref] = stage_marks.model_digest(ref)
        return self._digests[ref]

    def _check_stage_marks(self) -> int:
        """Index of the first stage to run. Finished stages form a prefix; each one's marker must match its
        inputs and outputs (else InputError naming the stage), checked before anything is written or deleted."""
        upstream: list[str] = []
        for i, stage in enumerate(STAGES):
            mark = stage_marks.read_mark(self.run.root, stage)
            if i >= self.force_from or mark is None:
                return i
            if mark.get("inputs") != self._stage_inputs(stage, upstream):
                raise InputError(f"stage '{stage}' finished on other inputs than this run's (a source file, an "
                                 "earlier stage's outputs or a model it reads changed since); rerun with "
                                 f"--force {stage}", path=str(self.run.root))
            outputs = stage_marks.tree_digest(self.stage_outputs(stage), self.run.root)
            if outputs != mark.get("outputs"):
                if stage in REBUILT_WHEN_CHANGED:
                    return i
                raise InputError(f"outputs of stage '{stage}' ({', '.join(mark.get('paths', []))}) changed after "
                                 f"it finished (edited or truncated?); rerun with --force {stage}",
                                 path=str(self.run.root))
            upstream.append(mark["outputs"])
        return len(STAGES)

    def _write_header(self) -> None:
        """The run directory, its study.yaml (with the config hash) and env.json; the marks of the stages to run
        removed, and the outputs of the forced ones."""
        from leakaudit.envinfo import environment

        self.run.root.mkdir(parents=True, exist_ok=True)
        for stage in STAGES[self._todo_from:]:
            stage_marks.remove_mark(self.run.root, stage)
        for stage in STAGES[self.force_from:]:
            for path in self.stage_outputs(stage):
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
        text = dump_config(self.cfg) + f"_meta:\n  config_hash: '{self.cfg.hash()}'\n"
        write_text(self.run.config, text)
        write_json(self.run.env, {**environment(self.cfg.seed), "precision": self.precision})

    def _mark(self, stage: str) -> None:
        i = STAGES.index(stage)
        upstream = [stage_marks.read_mark(self.run.root, s)["outputs"] for s in STAGES[:i]]
        stage_marks.write_mark(self.run.root, stage, self._stage_inputs(stage, upstream), self.stage_outputs(stage))
