"""Produces every stored run's metrics.json in results/ (the numbers of docs/results.md). Re-read finished runs with the current statistics, from their scores.parquet alone (leakaudit.report.build.
refresh_metrics): metrics.csv and metrics.json's metric keys rewritten in place, every other key kept.

    python experiments/reread_runs.py results/*
"""

import sys, time
from pathlib import Path
from leakaudit.report.build import refresh_metrics
for d in sys.argv[1:]:
    d = Path(d)
    if not (d / "scores.parquet").is_file():
        print("skip", d); continue
    t = time.time(); refresh_metrics(d); print(f"{d.name}: {time.time()-t:.0f} s", flush=True)
