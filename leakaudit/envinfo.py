"""Provenance: library versions, git hash, device — written to env.json and into metrics.json."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

LIBRARIES = ("leakaudit", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "safetensors", "numpy",
             "scipy", "scikit-learn", "pandas", "pyarrow", "seaborn", "matplotlib")


def library_versions() -> dict[str, str | None]:
    """Python and every library that shapes training, scoring or metrics; None when not installed."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_hash(cwd: str | Path | None = None) -> str | None:
    try:
        res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd or Path(__file__).parent, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None


def device_description() -> str:
    import torch

    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def environment(seed: int | None = None) -> dict:
    return {"python": platform.python_version(), "platform": platform.platform(), "libraries": library_versions(),
            "git": git_hash(), "device": device_description(), "seed": seed}
