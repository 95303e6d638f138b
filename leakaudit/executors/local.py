"""The local executors: jobs one after another in this process (`LocalExecutor`), or several at once, each in a
process of its own (`LocalProcessExecutor`, execution.local_workers > 1)."""

from __future__ import annotations

import os
import signal
import traceback
from typing import Any, Callable, Sequence

from leakaudit.envinfo import usable_cpus
from leakaudit.executors.jobs import (FAULT_ENV, RAY_POLL_S, Job, JobFailure, JobResults, Progress, call_job,
                                      first_line)


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
        conn.send(("error", f"{type(e).__name__}: {first_line(e)}", traceback.format_exc()))
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
                        failures.append(JobFailure(job.job_id, f"{type(e).__name__}: {first_line(e)}",
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
