"""What every maintained benchmark shares: the common command-line options, the machine record, one JSON schema.

A benchmark's result file is one JSON object:

    {"schema": 1, "name": ..., "commit": ..., "machine": {...}, "params": {...}, "metrics": {...}}

name: the benchmark (its file's stem); commit: the git commit of the checkout it ran from (None outside git);
machine: this machine as leakaudit records it for a run (CPU model, cores, usable CPUs, torch threads, bf16 support,
device, library versions) plus the load average before and after, since these machines are often shared;
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
import os
from pathlib import Path
from typing import Any

from leakaudit.envinfo import cpu_info, device_description, git_hash, library_versions
from leakaudit.io import write_json

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


def machine(load_before: list[float] | None = None) -> dict[str, Any]:
    """The machine record of a result: CPU, device, library versions and the load average around the measurement."""
    return {"cpu": cpu_info(), "device": device_description(), "libraries": library_versions(),
            "loadavg_before": load_before, "loadavg_after": load_average()}


def result(name: str, params: dict[str, Any], metrics: dict[str, Any], *,
           load_before: list[float] | None = None) -> dict[str, Any]:
    """One result object in the shared schema (module docstring); Paths in params become strings."""
    return {"schema": SCHEMA, "name": name, "commit": git_hash(REPO), "machine": machine(load_before),
            "params": {k: str(v) if isinstance(v, Path) else v for k, v in params.items()}, "metrics": metrics}


def write_result(path: str | Path, name: str, params: dict[str, Any], metrics: dict[str, Any], *,
                 load_before: list[float] | None = None) -> dict[str, Any]:
    """Write result(...) to `path` (atomically, parents made) and return it."""
    out = result(name, params, metrics, load_before=load_before)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(path, out)
    return out
