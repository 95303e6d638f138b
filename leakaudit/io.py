"""Atomic file writes and DONE markers: a stage's outputs count only once its marker exists.

Every writer goes through a temporary file in the same directory followed by os.replace, so a crash never
leaves a half-written file under its final name (imitating nanochat's "marker written last").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

DONE_NAME = "DONE"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it is renamed onto `path`, on error removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():
            os.chmod(tmp_path, 0o666 & ~_current_umask())  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_json_or_none(path: str | os.PathLike) -> Any:
    """read_json(path); None when there is no such file or it is not readable JSON (an optional input)."""
    path = Path(path)
    try:
        return read_json(path) if path.is_file() else None
    except (OSError, ValueError):
        return None


def read_parquet(path: str | os.PathLike, *, columns: list[str] | None = None, what: str = "parquet file"):
    """pd.read_parquet(path, columns=columns); a corrupt or unreadable file (pyarrow's errors, OSError) is an
    InputError naming it ('is not a readable <what> (<pyarrow's message>)') rather than a traceback."""
    import pandas as pd
    import pyarrow

    from leakaudit.errors import InputError

    try:
        return pd.read_parquet(path, columns=columns)
    except (pyarrow.ArrowException, OSError) as e:
        message = " ".join(str(e).split())
        raise InputError(f"is not a readable {what} ({message})", path=str(path)) from e


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def is_done(directory: str | os.PathLike) -> bool:
    """True when `directory` holds a DONE marker (its stage finished and every output is in place)."""
    return (Path(directory) / DONE_NAME).is_file()


def mark_done(directory: str | os.PathLike, info: dict | None = None) -> None:
    """Write the DONE marker last; `info` (e.g. wall time) is stored inside it as JSON."""
    write_json(Path(directory) / DONE_NAME, info or {})


PARTIAL_SUFFIX = ".partial"
PREVIOUS_SUFFIX = ".previous"
CHECKPOINT_SUFFIX = ".ckpt"


def partial_dir(final_dir: str | os.PathLike) -> Path:
    """Where `staging_dir` builds `final_dir` (a training student's ledger is there while it runs)."""
    final_dir = Path(final_dir)
    return final_dir.with_name(final_dir.name + PARTIAL_SUFFIX)


def previous_dir(final_dir: str | os.PathLike) -> Path:
    """Where `staging_dir` moves the version of `final_dir` it replaces, for the instant between its two renames."""
    final_dir = Path(final_dir)
    return final_dir.with_name(final_dir.name + PREVIOUS_SUFFIX)


def complete_version(final_dir: str | os.PathLike) -> Path | None:
    """`final_dir` when it is DONE; its previous version when a stop between `staging_dir`'s two renames left
    `final_dir` missing and that version complete; else None. Reads only (restore_previous puts it back)."""
    final_dir = Path(final_dir)
    if is_done(final_dir):
        return final_dir
    previous = previous_dir(final_dir)
    return previous if not final_dir.exists() and is_done(previous) else None


def restore_previous(final_dir: str | os.PathLike) -> None:
    """Undo what a stop inside `staging_dir`'s replacement left: the previous version goes back where `final_dir`
    is missing, and is deleted where `final_dir` is in place."""
    final_dir = Path(final_dir)
    previous = previous_dir(final_dir)
    if not previous.exists():
        return
    if final_dir.exists():
        shutil.rmtree(previous)
    else:
        os.replace(previous, final_dir)


def checkpoint_dir(final_dir: str | os.PathLike) -> Path:
    """Where a model being trained into `final_dir` keeps its resumable checkpoint (shadow_models.checkpoint)."""
    final_dir = Path(final_dir)
    return final_dir.with_name(final_dir.name + CHECKPOINT_SUFFIX)


def is_work_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a staging (`partial_dir`, `previous_dir`) or checkpoint (`checkpoint_dir`) folder beside
    its final folder, not a finished one, whatever it holds (each can hold a DONE marker and a ledger)."""
    return Path(path).name.endswith((PARTIAL_SUFFIX, PREVIOUS_SUFFIX, CHECKPOINT_SUFFIX))


@contextlib.contextmanager
def staging_dir(final_dir: str | os.PathLike) -> Iterator[Path]:
    """A fresh `<final>.partial` directory that replaces `final_dir` only when the block succeeds.

    A crash leaves only the `.partial` directory, which the next attempt deletes; `final_dir` is never seen
    half-complete. A version of `final_dir` already there is renamed aside (`previous_dir`) before the new one is
    renamed in, and deleted after: a stop at any instant leaves one complete version (`complete_version` finds
    it; the next attempt puts it back). Deleting it first, as this once did, lost it to a stop during the delete
    (a 1.6 GB training checkpoint takes a noticeable time to delete).
    """
    final_dir = Path(final_dir)
    restore_previous(final_dir)
    partial = partial_dir(final_dir)
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    yield partial
    if final_dir.exists():
        previous = previous_dir(final_dir)
        os.replace(final_dir, previous)
        os.replace(partial, final_dir)
        shutil.rmtree(previous)
    else:
        os.replace(partial, final_dir)
