"""How a process's heap memory is reused within a stage and handed back to the operating system between stages.

glibc's malloc keeps memory that Python and torch have freed in its arenas, so a process that once held a large
working set keeps it resident. The study's driver prepares the teacher in process (peak ~7 GB at micro-batch 4,
bench/results/teacher_memory.json) and then waits on Ray workers that each need as much again: without a trim it
sat at 6.4 GB while two students ran, and on a 24 GiB machine Ray's OOM killer took 5 of a cpu-full shard's 13
jobs (README, "cpu-full"). Written by hand because no dependency exposes malloc_trim (psutil reads memory, it does
not release it).

Within a stage the opposite matters (set_allocator_policy): glibc serves every block above its mmap threshold (at
most 32 MB) with a fresh mapping and unmaps it on free, so each training step's logits, activations and gradients
(hundreds of MB) are faulted in page by page again, step after step. On the AMX VM a re-fault costs ~35 us: an OPD
step of the default study's shapes faulted in ~1.0 M pages and spent 33 s in the kernel against 46 s of its own work
(44 s wall); with freed memory kept for reuse a step from the third on faults nothing and takes ~20 s, at the same
peak (7.7 GB) and the same arithmetic (python bench/bench_allocator.py, bench/results/allocator.json). The cost is
a multi-threaded process's: a 1-thread student (Ray's shape) faults as often at ~2 us a fault and gains ~1.02x in
steady state (bench/results/allocator_ray_shape.json).
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path


def status_kb(field: str) -> int | None:
    """A field of this process's /proc/self/status in kB (VmRSS, VmHWM, ...), None where /proc or the field is not
    there. The one reader of that file (the benchmarks use it too)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def resident_mb() -> float | None:
    """This process's resident set size now (VmRSS, MB), or None where /proc is not there."""
    kb = status_kb("VmRSS")
    return None if kb is None else kb / 1024


def _libc_function(name: str, argtypes: list, restype: object) -> ctypes._CFuncPtr | None:
    """A C function from the symbols already loaded in this process (libc's among them: no
    ctypes.util.find_library subprocess), typed; None where it is absent (malloc_trim and mallopt are glibc's)."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return fn


ALLOCATOR_POLICIES = ("reuse", "system")
# mallopt's parameter numbers (glibc malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# the largest value mallopt's int takes: blocks of 2 GB and more (none in a step at our shapes) still get their own
# mapping, so a one-off giant allocation still goes back to the OS when freed
_REUSE_MMAP_THRESHOLD = 2**31 - 1


def set_allocator_policy(policy: str) -> bool:
    """Set how glibc's malloc treats freed memory in this process from now on (process-wide; the study's driver and
    every Ray job call it with execution.allocator).

    'reuse': blocks up to 2 GB come from the heap, and free() keeps them for the next allocation instead of
    unmapping them or trimming the heap's top (mallopt M_MMAP_THRESHOLD = 2**31 - 1, M_TRIM_THRESHOLD = -1, i.e.
    never trim by itself): a step's working set is faulted in once, not once per step. The resident set stays at the
    process's peak until release_freed_memory() (malloc_trim, which ignores the threshold) runs at a stage's end,
    or the process exits (a Ray worker does after its job, jobs_per_worker = 1).
    'system': glibc's defaults, left as they are (a process that already set 'reuse' keeps it).
    True when the policy is in force; False where there is no glibc (nothing changed). ValueError for an unknown
    policy."""
    if policy not in ALLOCATOR_POLICIES:
        raise ValueError(f"allocator policy must be one of {', '.join(ALLOCATOR_POLICIES)}, got {policy!r}")
    if policy == "system":
        return True
    mallopt = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
    return (mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, _REUSE_MMAP_THRESHOLD))
            and bool(mallopt(_M_TRIM_THRESHOLD, -1)))


def release_freed_memory() -> bool:
    """Collect garbage, then ask glibc to return free arena pages to the OS (malloc_trim(0)). True when glibc
    released something; False where there is no glibc (macOS, musl) or nothing was released. Objects still
    referenced are untouched: this frees nothing that is in use."""
    gc.collect()
    trim = _libc_function("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
    return trim is not None and bool(trim(0))


def refaulted_pages(nbytes: int = 64 << 20) -> int | None:
    """Minor page faults of writing a block of `nbytes` that was just written and freed: ≈ nbytes / 4096 where
    glibc unmapped it on free (its defaults, blocks over 32 MB), ≈ 0 where the freed block is reused ('reuse').
    What set_allocator_policy changes, measured; None where there is no glibc."""
    import resource

    malloc = _libc_function("malloc", [ctypes.c_size_t], ctypes.c_void_p)
    free = _libc_function("free", [ctypes.c_void_p], None)
    if malloc is None or free is None:
        return None

    def write_once() -> None:
        block = malloc(nbytes)
        if not block:
            raise MemoryError(f"malloc({nbytes}) failed")
        ctypes.memset(block, 1, nbytes)
        free(block)

    write_once()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    write_once()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def allocator_probe_job(ctx: object, nbytes: int = 64 << 20) -> dict:
    """A job (executors.Job fn 'leakaudit.memory:allocator_probe_job') reporting whether its process reuses freed
    blocks: {'pid', 'refaulted_pages', 'pages'}. For checking that a cluster's workers got execution.allocator
    (docs/ray.md) and for the executor tests."""
    import os

    return {"pid": os.getpid(), "refaulted_pages": refaulted_pages(nbytes), "pages": nbytes // 4096}
