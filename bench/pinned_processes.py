"""Processes pinned to cores with as many torch threads as cores: the two executor shapes the *_parallel benchmarks
compare (the local executor: one process on every core; Ray with cpus_per_student=1: one 1-thread process per core).
Shared by bench/bench_students_parallel.py and bench/bench_signals_parallel.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path


def core_groups(shape: str, cores: list[int]) -> list[list[int]]:
    """'local': one group of every core; 'ray': one group per core."""
    return [cores] if shape == "local" else [[c] for c in cores]


def start_pinned(cores: list[int], argv: list[str]) -> subprocess.Popen:
    """`argv` under taskset on `cores`, with OMP_NUM_THREADS = MKL_NUM_THREADS = len(cores)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(len(cores)), "MKL_NUM_THREADS": str(len(cores))}
    return subprocess.Popen(["taskset", "-c", ",".join(map(str, cores)), *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_json(procs: list[tuple[Path, subprocess.Popen]], what: str) -> tuple[list, float]:
    """Wait for every process; each must exit 0 having written its JSON file. Returns the files' contents and the
    wall seconds from this call (the processes were started just before it) to the last exit."""
    start = time.perf_counter()
    outs = []
    for out, p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"{what}: a process failed:\n{err.decode()[-3000:]}")
        outs.append(json.loads(Path(out).read_text()))
    return outs, time.perf_counter() - start
