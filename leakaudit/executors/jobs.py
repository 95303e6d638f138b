"""Jobs as executors run them: a `Job` is plain data, `call_job` runs one where it lands (this process, a process
of its own, a Ray worker) as fn(JobContext, **kwargs), and a stage's failures come back as `JobsFailed`."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from leakaudit.memory import set_allocator_policy

PROBE_NAME = ".executor_probe.json"
"""Written by the driver in the run directory before it submits Ray tasks; hidden (stage digests skip it)."""
FAULT_ENV = "LEAKAUDIT_FAULT"
"""Fault injection for tests: comma-separated '<action>@<point>:<job_id>' (action raise | kill; point start: before
the job's function, step: after a training step's ledger line). Read by the driver when it submits jobs and handed
to each job as plain data, so it reaches Ray workers started before it was set."""
RAY_POLL_S = 1.0
"""How often the Ray executor refreshes the progress view while waiting for jobs."""


@dataclass(frozen=True)
class Job:
    """One unit of work: `fn` ('module:function') called as fn(ctx, **kwargs) with plain-data kwargs."""

    job_id: str
    fn: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobFailure:
    job_id: str
    error: str
    """One line: the exception type and message, or how the worker died."""
    detail: str = ""
    """The traceback where there is one (logged, not part of the summary)."""


@dataclass
class JobResults:
    results: dict[str, Any]
    failures: list[JobFailure]


class JobsFailed(RuntimeError):
    """Some jobs of a stage failed; every other job ran. The message names each failed job and its error."""

    def __init__(self, stage: str, failures: Sequence[JobFailure], n_jobs: int):
        self.stage, self.failures, self.n_jobs = stage, list(failures), n_jobs
        lines = [f"  {f.job_id}: {f.error}" for f in self.failures]
        super().__init__(f"{stage}: {len(self.failures)} of {n_jobs} jobs failed (a rerun redoes only the jobs "
                         "whose outputs are missing):\n" + "\n".join(lines))


class RunDirNotVisible(RuntimeError):
    """A worker cannot see the run directory the driver wrote."""


class Progress(Protocol):
    """What an executor reports to while it runs a stage (leakaudit.progress.StageProgress)."""

    def update(self, done: int, running: int, failed: int) -> None: ...


@dataclass(frozen=True)
class JobContext:
    """What a job function gets besides its kwargs: its id, a log, and the fault-injection points."""

    job_id: str
    log: Callable[[str], None] = print
    fault: str | None = None

    def checkpoint(self, point: str) -> None:
        """Act on a fault injected for this job at `point` (FAULT_ENV): raise, or SIGKILL this very process
        (what a crashed node or an OOM kill does to a worker)."""
        for spec in (self.fault or "").split(","):
            action, _, rest = spec.strip().partition("@")
            at, _, job_id = rest.partition(":")
            if job_id != self.job_id or at != point:
                continue
            if action == "raise":
                raise RuntimeError(f"injected fault at {point} of {job_id}")
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)


def _resolve(dotted: str) -> Callable[..., Any]:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def check_visible(probe: dict[str, str]) -> None:
    """Raise RunDirNotVisible unless the driver's probe file is readable here and holds its token."""
    path = Path(probe["path"])
    try:
        token = json.loads(path.read_text(encoding="utf-8")).get("token")
    except (OSError, ValueError):
        token = None
    if token != probe["token"]:
        node = socket.gethostname()
        raise RunDirNotVisible(f"node {node} (pid {os.getpid()}) cannot see the run directory {path.parent}: "
                               f"{path} is missing or was written by another run. The run directory must be on a "
                               "filesystem every Ray worker sees (set out_root to a shared path)")


def call_job(job_id: str, fn: str, kwargs: dict[str, Any], fault: str | None = None,
             probe: dict[str, str] | None = None, log: Callable[[str], None] | None = None,
             allocator: str | None = None) -> Any:
    """Run one job where it lands (this process or a Ray worker): set the process's allocator policy (a Ray
    worker's; the local executor's process is the driver, which set it already), check the run directory is
    visible, then fn(ctx, **kwargs)."""
    if allocator is not None:
        set_allocator_policy(allocator)
    if probe is not None:
        check_visible(probe)
    ctx = JobContext(job_id, log=log or print, fault=fault)
    ctx.checkpoint("start")
    return _resolve(fn)(ctx, **kwargs)


def echo_job(ctx: JobContext, **kwargs: Any) -> dict[str, Any]:
    """A job that loads nothing: where it ran (node, pid, OMP_NUM_THREADS) and its kwargs. For checking that a
    cluster runs leakaudit's jobs and sees the run directory (docs/ray.md), and for the executor tests."""
    torch = sys.modules.get("torch")  # imported already where the job's process set its threads
    return {"job_id": ctx.job_id, "node": socket.gethostname(), "pid": os.getpid(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "torch_threads": torch.get_num_threads() if torch is not None else None, **kwargs}


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
