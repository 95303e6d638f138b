"""What every maintained benchmark shares: the common command-line options, the machine record, one JSON schema.

A benchmark's result file is one JSON object:

    {"schema": 1, "name": ..., "commit": ..., "machine": {...}, "params": {...}, "metrics": {...}}

name: the benchmark (its file's stem less `bench_`, as its default result file is named); commit: the git commit of
the checkout it ran from (None outside git); machine: this machine as leakaudit records it for a run (CPU model,
cores, usable CPUs, torch threads, bf16 support, device, library versions), the platform, OMP_NUM_THREADS, the date
(UTC) and the load average before and after, since these machines are often shared;
params: what was asked (the command-line arguments); metrics: what was measured.

Usage, from a benchmark's main():

    ap = benchlib.parser("training", __doc__)      # --out (bench/results/<name>.json) and --threads
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    benchlib.apply_threads(args)
    load = benchlib.load_average()
    ... measure ...
    benchlib.write_result(args.out, "training", params=vars(args), metrics={...}, load_before=load)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from leakaudit.envinfo import cpu_info, device_description, git_hash, library_versions
from leakaudit.io import write_text

SCHEMA = 1
RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """An ArgumentParser with the options every benchmark takes: --out (default bench/results/<name>.json) and
    --threads (torch intra-op threads; default: torch's own choice)."""
    ap = argparse.ArgumentParser(description=(doc or name).split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS / f"{name}.json", help="result JSON (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    return ap


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's intra-op threads from --threads, when given."""
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine(load_before: list[float] | None = None, *, device: bool = True) -> dict[str, Any]:
    """The machine record of a result: CPU, device, library versions, platform, OMP_NUM_THREADS, the date and the load
    average around the measurement. device=False leaves the device out (None): naming a GPU starts CUDA in this
    process, which a driver of GPU jobs must not hold."""
    return {"cpu": cpu_info(), "device": device_description() if device else None, "libraries": library_versions(),
            "platform": platform.platform(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_before": load_before, "loadavg_after": load_average()}


def result(name: str, params: dict[str, Any], metrics: dict[str, Any], *,
           load_before: list[float] | None = None, device: bool = True) -> dict[str, Any]:
    """One result object in the shared schema (module docstring); Paths in params become strings."""
    return {"schema": SCHEMA, "name": name, "commit": git_hash(REPO), "machine": machine(load_before, device=device),
            "params": {k: str(v) if isinstance(v, Path) else v for k, v in params.items()}, "metrics": metrics}


def write_result(path: str | Path, name: str, params: dict[str, Any], metrics: dict[str, Any], *,
                 load_before: list[float] | None = None, device: bool = True) -> dict[str, Any]:
    """Write result(...) to `path` (atomically, parents made) and return it."""
    out = result(name, params, metrics, load_before=load_before, device=device)
    write_json(path, out)
    return out


def write_json(path: str | Path, obj: Any) -> None:
    """`obj` as indented JSON at `path`, keys in their own order (a result reads schema, name, ... metrics); numpy
    values as numbers, anything else JSON cannot hold as its str(). Atomic, parents made."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(obj, indent=2, default=_plain) + "\n")


def _plain(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)
