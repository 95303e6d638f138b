"""leakaudit.memory: freed heap memory goes back to the OS between stages (the driver kept the teacher's ~5 GB,
and Ray's OOM killer took 5 of a cpu-full shard's 13 students)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from leakaudit.config import load_config
from leakaudit.memory import release_freed_memory, resident_mb, status_kb

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="malloc_trim is glibc's")


@glibc
def test_release_returns_freed_heap_pages_that_free_alone_keeps():
    """256 MB in 64 KB blocks (below glibc's mmap threshold: heap memory), each page touched, then freed with one
    block left allocated above them, so free() cannot shrink the heap by itself: the pages stay resident until
    malloc_trim hands them back."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block, n = 64 * 1024, 6144  # 384 MB
    blocks = [libc.malloc(block) for _ in range(n)]
    pin = libc.malloc(block)  # above the others: the heap's top stays in use
    for b in blocks:
        ctypes.memset(b, 1, block)
    peak = resident_mb()
    for b in blocks:
        libc.free(b)
    kept = resident_mb()
    # free() alone gives (almost) nothing back; what the process held before the test does not enter either check
    # (in a long pytest process part of the blocks reuse pages already resident, which the trim returns as well)
    assert peak - kept < 64
    assert release_freed_memory() is True
    assert kept - resident_mb() > 256
    libc.free(pin)


def test_the_study_sets_the_allocator_policy_then_releases_memory_after_every_stage(monkeypatch, tmp_path):
    from leakaudit.pipeline import runner as runner_mod
    from leakaudit.study import STAGES, Study

    events = []
    monkeypatch.setattr(runner_mod, "release_freed_memory", lambda: events.append("release"))
    monkeypatch.setattr(runner_mod, "set_allocator_policy", lambda policy: events.append(f"allocator {policy}"))
    study = Study(load_config(preset="tiny", overrides=[f"out_root={tmp_path}", "execution.allocator=system"]),
                  log=lambda m: None)
    monkeypatch.setattr(Study, "prepare", lambda self: setattr(self, "_todo_from", 0))
    monkeypatch.setattr(Study, "_write_header", lambda self: None)
    monkeypatch.setattr(Study, "_mark", lambda self, stage: events.append(f"mark {stage}"))
    monkeypatch.setattr(Study, "stage_work", lambda self: {s: (lambda s=s: events.append(s)) for s in STAGES})
    study.run_all()
    # the driver's allocator policy (execution.allocator) before the first stage
    assert events == ["allocator system"] + [e for s in STAGES for e in (s, "release", f"mark {s}")]


def _refaults_in_a_fresh_process(policy: str) -> int:
    import subprocess
    import sys

    code = ("import sys; from leakaudit.memory import set_allocator_policy, refaulted_pages; "
            "assert set_allocator_policy(sys.argv[1]); print(refaulted_pages(256 << 20))")
    out = subprocess.run([sys.executable, "-c", code, policy], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@glibc
def test_reuse_policy_writes_a_freed_large_block_again_without_faulting_it_in():
    """A process of its own per policy (the policy is process-wide, and this one must not change pytest's). 256 MB
    is above glibc's largest dynamic mmap threshold (32 MB): by default it is mapped afresh and faulted in page by
    page on every use (65536 faults of 4 KB pages; fewer where THP is 'always', still more than none); under
    'reuse' the freed block is served again from the heap, already resident."""
    pages = (256 << 20) // 4096
    system, reuse = _refaults_in_a_fresh_process("system"), _refaults_in_a_fresh_process("reuse")
    assert reuse <= pages // 100
    assert system > max(reuse, 16)


def test_an_unknown_allocator_policy_is_refused():
    from leakaudit.memory import set_allocator_policy

    with pytest.raises(ValueError, match="allocator policy must be one of reuse, system, got 'jemalloc'"):
        set_allocator_policy("jemalloc")


def test_status_kb_reads_proc_self_status():
    """The one reader of /proc/self/status: the peak is at least the resident set, a field it lacks is None."""
    rss, hwm = status_kb("VmRSS"), status_kb("VmHWM")
    assert rss > 0 and hwm >= rss
    assert abs(resident_mb() * 1024 - rss) < 64 * 1024  # read a moment apart
    assert status_kb("NoSuchField") is None
