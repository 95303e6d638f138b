"""Provenance for results files: config hash, input hashes, time (after lm-eval's result schema);
library versions come from leakaudit.envinfo."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

def config_hash(config: dict) -> str:
    """sha256 of the config as canonical JSON (sorted keys), so formatting of study.yaml does not matter."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def run_config_hash(config: dict) -> str:
    """The hash run-study recorded for this run (study.yaml's `_meta.config_hash`, the same value the run
    directory is checked against on resume); a canonical hash of the config only when none was recorded."""
    recorded = (config.get("_meta") or {}).get("config_hash")
    return str(recorded) if recorded else config_hash(config)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
