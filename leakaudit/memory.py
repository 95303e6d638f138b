"""Hand freed heap memory back to the operating system between a study's stages.

glibc's malloc keeps memory that Python and torch have freed in its arenas, so a process that once held a large
working set keeps it resident. The study's driver prepares the teacher in process (peak ~7 GB at micro-batch 4,
bench/results/teacher_memory.json) and then waits on Ray workers that each need as much again: without a trim it
sat at 6.4 GB while two students ran, and on a 24 GiB machine Ray's OOM killer took 5 of a cpu-full shard's 13
jobs (README, "cpu-full"). Written by hand because no dependency exposes malloc_trim (psutil reads memory, it does
not release it).
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path


def resident_mb() -> float | None:
    """This process's resident set size now (VmRSS, MB), or None where /proc is not there."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def release_freed_memory() -> bool:
    """Collect garbage, then ask glibc to return free arena pages to the OS (malloc_trim(0)). True when glibc
    released something; False where there is no glibc (macOS, musl) or nothing was released. Objects still
    referenced are untouched: this frees nothing that is in use."""
    gc.collect()
    try:  # the symbols already loaded in this process (libc's among them): no ctypes.util.find_library subprocess
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))
