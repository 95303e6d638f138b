"""Locks between processes: one study process per run directory, and one maker of a shared artefact at a time.

filelock (already installed with torch, datasets and huggingface_hub) takes an flock on `<path>.lock`; the kernel
drops it when the holder dies, so a run killed with kill -9 leaves no stale lock behind and resumes as before. The
lock file itself stays (an empty, hidden file; its presence means nothing, and a stage's output digest skips hidden
files, leakaudit.stage_marks.tree_digest).

Why they are needed: leakaudit.io.staging_dir deletes a `<target>.partial` it finds, assuming a crash left it. With
two processes making the same target at once (two shards of a study started together on a fresh machine, both
de-quantising the offline model; a job array of `leakaudit train --model-id` all preparing the run's teacher; the
same run started twice) the second deletes the first's work in progress.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from leakaudit.errors import LeakauditError
from leakaudit.rundir import RUN_LOCK, claim_run_root, write_run_marker


def lock_path(target: Path) -> Path:
    """`.<name>.lock` beside the target (a directory or a file): hidden, so no listing of models takes it for one."""
    target = Path(target)
    return target.with_name(f".{target.name}.lock")


@contextmanager
def made_once(target: Path) -> Iterator[None]:
    """Wait for, then hold, the lock of `target` while this process checks whether it is made and makes it if
    not: a second process waits, then finds it made. Blocks without a limit (making the artefact takes minutes)."""
    path = lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path)):
        yield


def launch_ranks() -> tuple[int, int]:
    """(processes, this process's rank) of an `accelerate launch` / torchrun launch (their WORLD_SIZE and RANK);
    (1, 0) for a plain process. The processes of one launch make a model together (a collective), so they must
    not take made_once's lock one after another: the first would wait for the others inside the collective."""
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


@contextmanager
def run_exclusively(root: Path, *, writes: bool = True) -> Iterator[None]:
    """Hold the run directory's lock, or raise LeakauditError (exit 2) at once when another process holds it.
    `writes`: the holder writes the run (a study, an audit, a pool): `root` is created if needed, only where a run
    may write (leakaudit.rundir.claim_run_root: new, empty or made by leakaudit; call it after validating the
    inputs: a refused run writes nothing else), and marked as a run. Without it (a pool's shards, read only) the
    directory must exist and is left as it is."""
    root = Path(root)
    if writes:
        claim_run_root(root)
    lock = FileLock(str(root / RUN_LOCK))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise LeakauditError(f"{root}: another leakaudit process is running this study (it holds "
                             f"{root / RUN_LOCK}); wait for it to end or stop it, then run again: the run "
                             "resumes where it stopped") from None
    except OSError as e:  # a directory that refuses the lock file (read-only mount, immutable): exit 2 naming it
        raise LeakauditError(f"{root / RUN_LOCK}: cannot take the run directory's lock ({e.strerror or e})") from None
    try:
        if writes:
            write_run_marker(root)
        yield
    finally:
        lock.release()
