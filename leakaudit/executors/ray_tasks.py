"""The Ray executor (execution.backend: ray): each job a Ray task placed by Ray on a laptop, a node or a cluster.
Ray is imported only here, and only for that backend."""

from __future__ import annotations

import importlib.util
import os
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from leakaudit.errors import ConfigError
from leakaudit.executors.jobs import (FAULT_ENV, PROBE_NAME, RAY_POLL_S, Job, JobFailure, JobResults, Progress,
                                      call_job, first_line)

if TYPE_CHECKING:  # the config module imports pydantic and the sections' packages; the CLI imports this module
    from leakaudit.config import ExecutionConfig


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
        leave an infeasible task pending forever). The runner's prepare() calls it before a run writes anything."""
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
                        failures.append(JobFailure(job.job_id, f"{type(cause).__name__}: {first_line(cause)}",
                                                   str(e)))
                    except ray.exceptions.RayError as e:  # the worker or its node died (SIGKILL, OOM, lost node)
                        failures.append(JobFailure(job.job_id,
                                                   f"worker died ({type(e).__name__}: {first_line(e)})", str(e)))
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


def import_ray() -> Any:
    """The ray module, or ConfigError (exit 2) naming execution.backend when it is not installed."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError("execution.backend: 'ray' needs the ray package, which is not installed; "
                          "pip install 'leakaudit[ray]' (or use execution.backend=local)")
    import ray

    return ray
