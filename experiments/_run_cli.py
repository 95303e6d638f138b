"""The command line shared by experiments/ scripts that analyse finished runs: RUN_DIR... [--n-boot N] [--json OUT]."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable


def main_over_runs(analyse: Callable[[Path, int], dict], doc: str) -> None:
    """Parse the arguments, call `analyse(run_dir, n_boot)` for each run, write the list of results to --json."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", type=Path, nargs="+")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = [analyse(r, args.n_boot) for r in args.run_dirs]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
