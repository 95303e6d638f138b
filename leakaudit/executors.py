"""Executors: run a stage's independent jobs in this process, in local processes of their own (several at once) or
as Ray tasks, behind one call, `run_jobs`.

The students stage (one job per student) and the signals stage (one job per target for sampling, then one per
model for scoring) hand their jobs to the run's executor (`make_executor(cfg.execution, ...)`):

    results = executor.run_jobs(jobs, stage="students", progress=bar)   # -> JobResults(results, failures)

Contract shared by both executors:
- A `Job` is plain data: an id (a student's model_id, "sample:<target>", "score:<model>"), the dotted name of a
  module-level function ("package.module:function") and JSON-like keyword arguments (paths, dicts, lists). Models
  never travel; a job loads what it needs from the run directory. The function is called as
  `fn(ctx: JobContext, **kwargs)`.
- Every job runs, whatever the others do; `run_jobs` returns each job's result or its failure (id + one-line
  error). It does not raise for a failed job: the stage decides (`JobsFailed` lists every failure).
- Jobs write their outputs with the stages' own DONE-marker-last semantics (staging directory renamed into place,
  atomic files), so a job killed mid-way leaves nothing that looks complete and a rerun redoes only what is
  missing. Executors add no state of their own to the run directory besides the visibility probe.

Ray (`execution.backend: ray`) is imported only here and only for that backend. Each Ray task first checks that it
can see the run directory (a probe file the driver writes before submitting), so a worker on a node without the
shared filesystem fails at once naming the path and the node instead of hanging or writing elsewhere.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import socket
import sys
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from leakaudit.envinfo import usable_cpus
from leakaudit.errors import ConfigError
from leakaudit.memory import set_allocator_policy

if TYPE_CHECKING:  # the config module imports pydantic and the sections' packages; the CLI imports this module
    from leakaudit.config import ExecutionConfig

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


class LocalExecutor:
    """Jobs one after another in this process (the default; no Ray). A job that raises is recorded and the next
    one runs; KeyboardInterrupt still stops the study."""

    name = "local"
    in_process = True
    """Jobs run in the driver's process (they may draw their own progress bars)."""

    def __init__(self, log: Callable[[str], None] = print):
        self.log = log

    def start(self) -> None:
        """Nothing to start or check: jobs run in this process."""

    def run_jobs(self, jobs: Sequence[Job], *, stage: str, progress: Progress | None = None) -> JobResults:
        results: dict[str, Any] = {}
        failures: list[JobFailure] = []
        fault = os.environ.get(FAULT_ENV)
        for job in jobs:
            if progress is not None:
                progress.update(len(results), 1, len(failures))
            try:
                results[job.job_id] = call_job(job.job_id, job.fn, job.kwargs, fault=fault, log=self.log)
            except Exception as e:  # any error of one job is that job's failure; the others still run
                failures.append(JobFailure(job.job_id, f"{type(e).__name__}: {e}", traceback.format_exc()))
        if progress is not None:
            progress.update(len(results), 0, len(failures))
        return JobResults(results, failures)

    def close(self) -> None:
        """Nothing to release."""


def _process_job(conn: Any, threads: int, job_id: str, fn: str, kwargs: dict[str, Any], fault: str | None,
                 allocator: str) -> None:
    """The body of one LocalProcessExecutor job's process: dies with the driver (Linux), `threads` torch threads,
    then call_job; sends back ("ok", result) or ("error", one line, traceback). A process that dies sends nothing
    (the driver sees it)."""
    _die_with_parent()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch

        torch.set_num_threads(threads)
        conn.send(("ok", call_job(job_id, fn, kwargs, fault=fault, allocator=allocator)))
    except BaseException as e:  # noqa: BLE001 - every error of the job is reported to the driver, by its id
        conn.send(("error", f"{type(e).__name__}: {_first_line(e)}", traceback.format_exc()))
    finally:
        conn.close()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the driver that spawned it dies (kill -9, the OOM killer): an orphaned
    job would go on writing models/<id>.partial while a rerun writes it too. Elsewhere a no-op."""
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class LocalProcessExecutor:
    """`workers` jobs at once on this machine, each in a fresh spawned process at usable cores // workers torch
    threads (execution.local_workers > 1). Per-job processes are started by hand rather than through
    concurrent.futures.ProcessPoolExecutor because a pool that loses one worker (SIGKILL, the OOM killer) fails
    every pending job with BrokenProcessPool; here a dead process fails only its own job, as a Ray worker does."""

    name = "local"
    in_process = False

    def __init__(self, workers: int, allocator: str = "reuse", log: Callable[[str], None] = print,
                 cores: int | None = None):
        self.workers, self.allocator, self.log = workers, allocator, log
        self.threads = max(1, (cores or usable_cpus() or 1) // workers)

    def start(self) -> None:
        """Nothing to start: each job starts its own process."""

    def _launch(self, mp: Any, job: Job, fault: str | None) -> tuple[Any, Any]:
        receive, send = mp.Pipe(duplex=False)
        proc = mp.Process(target=_process_job, name=f"leakaudit:{job.job_id}", daemon=False,
                          args=(send, self.threads, job.job_id, job.fn, job.kwargs, fault, self.allocator))
        proc.start()
        send.close()  # the child holds the only send end: EOF here once it exits
        return proc, receive

    def run_jobs(self, jobs: Sequence[Job], *, stage: str, progress: Progress | None = None) -> JobResults:
        import multiprocessing
        from multiprocessing.connection import wait

        mp = multiprocessing.get_context("spawn")  # no fork of a driver that holds torch's threads and models
        results: dict[str, Any] = {}
        failures: list[JobFailure] = []
        fault = os.environ.get(FAULT_ENV)
        pending, running = list(jobs), {}
        try:
            while pending or running:
                while pending and len(running) < self.workers:
                    job = pending.pop(0)
                    try:
                        running[job.job_id] = self._launch(mp, job, fault)
                    except Exception as e:  # kwargs that do not pickle, no memory for a process: this job only
                        failures.append(JobFailure(job.job_id, f"{type(e).__name__}: {_first_line(e)}",
                                                   traceback.format_exc()))
                if progress is not None:
                    progress.update(len(results), len(running), len(failures))
                wait([conn for _, conn in running.values()], timeout=RAY_POLL_S)
                for job_id, (proc, conn) in list(running.items()):
                    alive = proc.is_alive()  # before poll: a child sends its result before it exits
                    message: Any = None
                    if conn.poll():
                        try:
                            message = conn.recv()
                        except Exception:  # EOF (died without a word), cut mid-message, a result that won't load
                            message = None
                    elif alive:
                        continue
                    proc.join(timeout=60)
                    if proc.is_alive():  # sent its result but hangs on the way out
                        proc.kill()
                        proc.join()
                    conn.close()
                    del running[job_id]
                    if message is None:
                        code = proc.exitcode
                        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                        failures.append(JobFailure(job_id, f"worker died (process {proc.pid}, {how})"))
                    elif message[0] == "ok":
                        results[job_id] = message[1]
                    else:
                        failures.append(JobFailure(job_id, message[1], message[2]))
        finally:
            # interrupted (Ctrl-C): stop the jobs still running, all of them before waiting for any; their outputs
            # are not marked DONE
            for proc, _ in running.values():
                proc.kill()
            for proc, conn in running.values():
                proc.join()
                conn.close()
        if progress is not None:
            progress.update(len(results), 0, len(failures))
        return JobResults(results, failures)

    def close(self) -> None:
        """Nothing to release: every job's process has ended."""


class RayExecutor:
    """Each job a Ray task asking for cfg.cpus_per_student CPUs and cfg.gpus_per_student GPUs; Ray places them
    (a laptop, a node with several GPUs, a cluster). Joins `cfg.address` (or an instance this process already
    started, e.g. a test's ray.init), else starts a local instance and shuts it down on close()."""

    name = "ray"
    in_process = False

    def __init__(self, cfg: ExecutionConfig, run_root: Path, log: Callable[[str], None] = print):
        self.cfg = cfg
        self.run_root = Path(run_root).resolve()
        self.log = log
        self._ray: Any = None
        self._started_here = False

    def start(self) -> Any:
        """Join or start Ray and check that one job's request fits the cluster (ConfigError otherwise: Ray would
        leave an infeasible task pending forever). Study.prepare calls it before a run writes anything."""
        if self._ray is not None:
            return self._ray
        ray = import_ray()
        if not ray.is_initialized():
            ray.init(address=self.cfg.address, log_to_driver=True, include_dashboard=False)
            self._started_here = True
        self._ray = ray
        have = ray.cluster_resources()
        for field, resource, hint in (("gpus_per_student", "GPU", "set execution.gpus_per_student=0 to run on CPUs "
                                                                   "(or join a cluster with GPUs via "
                                                                   "execution.address)"),
                                      ("cpus_per_student", "CPU", "ask for fewer")):
            wanted, there = getattr(self.cfg, field), have.get(resource, 0)
            if wanted > there:
                raise ConfigError(f"execution.{field}: each job asks for {wanted:g} {resource}s but the Ray cluster "
                                  f"has {there:g}; {hint}")
        return ray

    def _write_probe(self) -> dict[str, str]:
        from leakaudit.io import write_json

        probe = {"path": str(self.run_root / PROBE_NAME), "token": uuid.uuid4().hex}
        write_json(probe["path"], {"token": probe["token"], "driver": socket.gethostname()})
        return probe

    def run_jobs(self, jobs: Sequence[Job], *, stage: str, progress: Progress | None = None) -> JobResults:
        results: dict[str, Any] = {}
        failures: list[JobFailure] = []
        if not jobs:
            return JobResults(results, failures)
        ray = self.start()
        probe = self._write_probe()
        fault = os.environ.get(FAULT_ENV)
        # Ray takes max_calls in ray.remote only, not in .options(); 0 = no limit
        task = ray.remote(max_calls=self.cfg.jobs_per_worker)(call_job)
        by_ref = {}
        for job in jobs:
            # the task's name in Ray's logs and dashboard: students:math-s0, sample:math-s0 (ids that carry a stage
            # already are not prefixed again)
            name = job.job_id if job.job_id.startswith(f"{stage}:") else f"{stage}:{job.job_id}"
            ref = task.options(num_cpus=self.cfg.cpus_per_student, num_gpus=self.cfg.gpus_per_student,
                               max_retries=self.cfg.max_retries, name=name
                               ).remote(job.job_id, job.fn, job.kwargs, fault=fault, probe=probe,
                                         allocator=self.cfg.allocator)
            by_ref[ref] = job
        waiting = list(by_ref)
        try:
            while waiting:
                if progress is not None:
                    progress.update(len(results), len(waiting), len(failures))
                ready, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=RAY_POLL_S, fetch_local=False)
                for ref in ready:
                    job = by_ref[ref]
                    try:
                        results[job.job_id] = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:  # the job's function raised: report its own error
                        cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
                        failures.append(JobFailure(job.job_id, f"{type(cause).__name__}: {_first_line(cause)}",
                                                   str(e)))
                    except ray.exceptions.RayError as e:  # the worker or its node died (SIGKILL, OOM, lost node)
                        failures.append(JobFailure(job.job_id,
                                                   f"worker died ({type(e).__name__}: {_first_line(e)})", str(e)))
        finally:
            # interrupted (Ctrl-C): stop this stage's tasks on a cluster that outlives the driver; their partial
            # outputs are not marked DONE, so the rerun redoes them
            for ref in waiting:
                ray.cancel(ref, force=True)
        if progress is not None:
            progress.update(len(results), 0, len(failures))
        return JobResults(results, failures)

    def close(self) -> None:
        """Shut down the Ray instance this executor started (one it joined is left running)."""
        if self._started_here and self._ray is not None:
            self._ray.shutdown()
        self._ray, self._started_here = None, False


def echo_job(ctx: JobContext, **kwargs: Any) -> dict[str, Any]:
    """A job that loads nothing: where it ran (node, pid, OMP_NUM_THREADS) and its kwargs. For checking that a
    cluster runs leakaudit's jobs and sees the run directory (docs/ray.md), and for the executor tests."""
    torch = sys.modules.get("torch")  # imported already where the job's process set its threads
    return {"job_id": ctx.job_id, "node": socket.gethostname(), "pid": os.getpid(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "torch_threads": torch.get_num_threads() if torch is not None else None, **kwargs}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def import_ray() -> Any:
    """The ray module, or ConfigError (exit 2) naming execution.backend when it is not installed."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError("execution.backend: 'ray' needs the ray package, which is not installed; "
                          "pip install 'leakaudit[ray]' (or use execution.backend=local)")
    import ray

    return ray


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
