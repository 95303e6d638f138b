"""Executors: run a stage's independent jobs in this process, in local processes of their own (several at once) or
as Ray tasks, behind one call, `run_jobs`.

The students stage (one job per student) and the signals stage (one job per target for sampling, then one per
model for scoring) hand their jobs to the run's executor (`make_executor(cfg.execution, ...)`):

    results = executor.run_jobs(jobs, stage="students", progress=bar)   # -> JobResults(results, failures)

Contract shared by the executors:
- A `Job` is plain data: an id (a student's model_id, "sample:<target>", "score:<model>"), the dotted name of a
  module-level function ("package.module:function") and JSON-like keyword arguments (paths, dicts, lists). Models
  never travel; a job loads what it needs from the run directory. The function is called as
  `fn(ctx: JobContext, **kwargs)`.
- Every job runs, whatever the others do; `run_jobs` returns each job's result or its failure (id + one-line
  error). It does not raise for a failed job: the stage decides (`JobsFailed` lists every failure).
- Jobs write their outputs with the stages' own DONE-marker-last semantics (staging directory renamed into place,
  atomic files), so a job killed mid-way leaves nothing that looks complete and a rerun redoes only what is
  missing. Executors add no state of their own to the run directory besides the visibility probe.

Ray (`execution.backend: ray`) is imported only by `ray_tasks` and only for that backend. Each Ray task first checks
that it can see the run directory (a probe file the driver writes before submitting), so a worker on a node without
the shared filesystem fails at once naming the path and the node instead of hanging or writing elsewhere.

Modules: `jobs` (Job, JobContext, call_job, JobsFailed: what every executor shares), `local` (in this process, or a
process per job), `ray_tasks` (Ray). Import the names from here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from leakaudit.executors.jobs import (FAULT_ENV, PROBE_NAME, RAY_POLL_S, Job, JobContext, JobFailure, JobResults,
                                      JobsFailed, Progress, RunDirNotVisible, call_job, check_visible, echo_job)
from leakaudit.executors.local import LocalExecutor, LocalProcessExecutor
from leakaudit.executors.ray_tasks import RayExecutor, import_ray

if TYPE_CHECKING:  # the config module imports pydantic and the sections' packages; the CLI imports this module
    from leakaudit.config import ExecutionConfig

__all__ = ["FAULT_ENV", "PROBE_NAME", "RAY_POLL_S", "Job", "JobContext", "JobFailure", "JobResults", "JobsFailed",
           "LocalExecutor", "LocalProcessExecutor", "Progress", "RayExecutor", "RunDirNotVisible", "call_job",
           "check_backend", "check_visible", "echo_job", "import_ray", "make_executor"]


def check_backend(cfg: ExecutionConfig) -> None:
    """Fail before a run writes anything when its backend cannot run here (ray requested but not installed)."""
    if cfg.backend == "ray" and importlib.util.find_spec("ray") is None:
        import_ray()


def make_executor(cfg: ExecutionConfig, run_root: Path, log: Callable[[str], None] = print
                  ) -> LocalExecutor | LocalProcessExecutor | RayExecutor:
    """The executor `cfg.backend` (and, for local, `cfg.local_workers`) names (Ray is imported at its first job,
    not here)."""
    check_backend(cfg)
    if cfg.backend == "ray":
        return RayExecutor(cfg, run_root, log)
    if cfg.local_workers > 1:
        return LocalProcessExecutor(cfg.local_workers, cfg.allocator, log)
    return LocalExecutor(log)
