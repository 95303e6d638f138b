"""leakaudit.memory: freed heap memory goes back to the OS between stages (the driver kept the teacher's ~5 GB,
and Ray's OOM killer took 5 of a cpu-full shard's 13 students)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from leakaudit.config import load_config
from leakaudit.memory import release_freed_memory, resident_mb

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


def test_the_study_releases_memory_after_every_stage(monkeypatch, tmp_path):
    from leakaudit import study as study_mod
    from leakaudit.study import STAGES, Study

    events = []
    monkeypatch.setattr(study_mod, "release_freed_memory", lambda: events.append("release"))
    study = Study(load_config(preset="tiny", overrides=[f"out_root={tmp_path}"]), log=lambda m: None)
    monkeypatch.setattr(Study, "prepare", lambda self: setattr(self, "_todo_from", 0))
    monkeypatch.setattr(Study, "_write_header", lambda self: None)
    monkeypatch.setattr(Study, "_mark", lambda self, stage: events.append(f"mark {stage}"))
    for stage in STAGES:
        monkeypatch.setattr(Study, f"stage_{stage}", lambda self, s=stage: events.append(s))
    study.run_all()
    assert events == [e for s in STAGES for e in (s, "release", f"mark {s}")]
