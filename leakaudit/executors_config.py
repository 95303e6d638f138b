"""The study config's `execution` section: where the students and signals jobs run (leakaudit.executors).

Beside the executors it configures; validated with the rest of the study config by leakaudit.config (which
re-exports it), and left out of the config's hash.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakaudit.config_section import FORBID
from leakaudit.errors import ConfigError
from leakaudit.memory import ALLOCATOR_POLICIES


EXECUTION_BACKENDS = ("local", "ray")


@dataclass
class ExecutionConfig:
    """Where the students and signals stages run their jobs (leakaudit.executors): one job per student, one per
    target for sampling, one per model for scoring. It is left out of `StudyConfig.hash` (a run directory resumes
    under either backend), so know what it can change: a job's torch thread count (local_workers, cpus_per_student)
    sets the reduction order, hence float rounding (~1e-5 nats in the tiny study's scores), and through training
    and sampling such a difference can grow into other sampled tokens. The same execution section on the same
    machine reproduces a run byte for byte; the tests compare executors at equal thread counts."""

    __pydantic_config__ = FORBID

    backend: str = "local"
    """'local' = jobs on this machine, no Ray needed (`local_workers` says how many at once); 'ray' = each job a
    Ray task (the optional extra `leakaudit[ray]`). With ray the run directory must be on a filesystem every Ray
    worker sees."""
    local_workers: int = 1
    """local: jobs run at once. 1 = one after another in this process, at every core's threads. n > 1 = each job in
    a fresh process of its own (spawned, so its memory goes back to the OS when it ends), n at a time, each at
    usable cores // n torch threads: on 2 cores two 1-thread jobs do more work per hour than one 2-thread job
    (students 1.12x on an AMD EPYC, 1.28x on an Intel Xeon with AMX; signals 1.2x;
    bench/results/students_parallel*.json, signals_parallel.json), at twice the memory (a student peaks at ~7-8 GB).
    A job whose process dies is reported by its id, the others go on."""
    address: str | None = None
    """ray: the cluster to join (ray.init(address=...)): 'auto' = the cluster `ray start` set up on this node,
    'ray://host:10001' = a remote head; null = start a Ray instance on this machine for the run."""
    gpus_per_student: float = 1.0
    """ray: GPUs each job asks Ray for (a student, a target's sampling, a model's scoring); 0 on CPU-only clusters.
    A job that asks for more GPUs than the cluster has is refused before anything is submitted (no hang)."""
    cpus_per_student: float = 1.0
    """ray: CPUs each job asks Ray for (> 0). Ray sets OMP_NUM_THREADS in the worker from it."""
    max_retries: int = 0
    """ray: times Ray reruns a job whose worker process died (Ray's task max_retries). 0: a dead worker is
    reported with the job's id and the study's rerun redoes the job (the DONE markers say what is missing)."""
    jobs_per_worker: int = 1
    """ray: jobs one Ray worker process runs before it exits (Ray's task `max_calls`). 1 = a fresh process per job,
    so a job's memory goes back to the OS when it ends: a student peaks at ~7 GB at micro-batch 4 and a reused
    worker kept 8.5 GB after it, which with a second student and the driver took a 24 GiB machine into Ray's OOM
    killer. 0 = reuse workers without limit (saves a process start, a few seconds, per job)."""
    allocator: str = "reuse"
    """How the driver and every job's process treat freed heap memory (leakaudit.memory.set_allocator_policy; both
    backends). 'reuse' = freed blocks stay in the process for the next step (glibc mmap threshold 2 GB, no automatic
    trim), given back at each stage's end: on a 2-core Intel Xeon with AMX an OPD step after the first then faults
    ~0.1 M pages instead of ~1.0 M and takes 26 s instead of 44 (from the third step on 20 s), at the same peak
    (bench/results/allocator.json). 'system' = glibc's defaults (each block over 32 MB mapped and unmapped per use).
    Results do not depend on it."""

    def __post_init__(self) -> None:
        if self.backend not in EXECUTION_BACKENDS:
            raise ConfigError(f"execution.backend: must be one of {', '.join(EXECUTION_BACKENDS)}, "
                              f"got {self.backend!r}")
        if self.address is not None and not str(self.address).strip():
            raise ConfigError("execution.address: must be a Ray address ('auto', 'ray://host:port') or null")
        if self.gpus_per_student < 0:
            raise ConfigError(f"execution.gpus_per_student: must be >= 0, got {self.gpus_per_student}")
        if self.cpus_per_student <= 0:
            raise ConfigError(f"execution.cpus_per_student: must be > 0, got {self.cpus_per_student}")
        if self.local_workers < 1:
            raise ConfigError(f"execution.local_workers: must be >= 1, got {self.local_workers}")
        if self.max_retries < 0:
            raise ConfigError(f"execution.max_retries: must be >= 0, got {self.max_retries}")
        if self.allocator not in ALLOCATOR_POLICIES:
            raise ConfigError(f"execution.allocator: must be one of {', '.join(ALLOCATOR_POLICIES)}, "
                              f"got {self.allocator!r}")
        if self.jobs_per_worker < 0:
            raise ConfigError(f"execution.jobs_per_worker: must be >= 0 (0 = no limit), got {self.jobs_per_worker}")
