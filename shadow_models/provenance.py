"""Library versions and wall-clock provenance stored in every student's meta.json."""

from __future__ import annotations

import platform
from importlib import metadata


def library_versions() -> dict[str, str]:
    """Versions of python and of every library that shapes training numerics."""
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "numpy", "safetensors", "leakaudit"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out
