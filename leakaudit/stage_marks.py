"""Stage markers: a stage of a run counts as done only while its marker holds the hash of the inputs it ran on
and its outputs still hash to what it wrote.

`runs/<name>/stages/<stage>.json` = {"stage", "inputs": sha256, "outputs": sha256, "paths": [...]}, written last
(after every output of the stage is in place), like the per-model DONE markers. A resumed run compares both
hashes before it writes or deletes anything, so a hand-edited or truncated records.jsonl, a plan changed
under a finished run, or a target model retrained in place is an error naming the stage, not stale results
reported as done.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from leakaudit.io import read_json, write_json

MARK_DIR = "stages"


def _hash_file(path: Path, h: "hashlib._Hash") -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def tree_digest(paths: Iterable[Path], root: Path) -> str:
    """sha256 over every file under `paths` (files or directories): relative path, size and content, in sorted
    order. Missing paths count as absent (their name is hashed with a marker), hidden temporary files
    (`.name.tmp`, written by atomic writers) are skipped."""
    h = hashlib.sha256()
    for top in sorted({Path(p) for p in paths}):
        files = sorted(f for f in top.rglob("*") if f.is_file()) if top.is_dir() else [top]
        if not top.exists():
            h.update(f"absent:{os.path.relpath(top, root)}\0".encode())
            continue
        for f in files:
            if f.name.startswith("."):
                continue
            h.update(f"{os.path.relpath(f, root)}\0{f.stat().st_size}\0".encode())
            _hash_file(f, h)
    return h.hexdigest()


def model_digest(ref: str) -> str:
    """A model reference's identity for stage inputs: the content digest of a local directory (so a model
    retrained in place is noticed), else the reference string itself (a hub id or a built-in name)."""
    p = Path(ref)
    if p.is_dir():
        return "dir:" + tree_digest([p], p)
    return "ref:" + ref


def inputs_hash(parts: dict) -> str:
    """sha256 of a JSON-able description of a stage's inputs."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def mark_path(root: Path, stage: str) -> Path:
    return Path(root) / MARK_DIR / f"{stage}.json"


def read_mark(root: Path, stage: str) -> dict | None:
    path = mark_path(root, stage)
    return read_json(path) if path.is_file() else None


def write_mark(root: Path, stage: str, inputs: str, outputs: Iterable[Path]) -> dict:
    outputs = sorted({Path(p) for p in outputs})
    mark = {"stage": stage, "inputs": inputs, "outputs": tree_digest(outputs, Path(root)),
            "paths": [os.path.relpath(p, root) for p in outputs]}
    write_json(mark_path(root, stage), mark)
    return mark


def remove_mark(root: Path, stage: str) -> None:
    path = mark_path(root, stage)
    if path.is_file():
        path.unlink()
