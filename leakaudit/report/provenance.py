"""Provenance for results files: library versions, config hash, input hashes (after lm-eval's result schema)."""

from __future__ import annotations

import hashlib
import json
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

LIBRARIES = ("leakaudit", "numpy", "pandas", "scipy", "scikit-learn", "seaborn", "matplotlib", "pyarrow")


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def config_hash(config: dict) -> str:
    """sha256 of the config as canonical JSON (sorted keys), so formatting of study.yaml does not matter."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
