"""Benchmark: the wall time of `leakaudit report` on a stored run, step by step.

A stored run of results/ (study.yaml, scores.parquet, metrics.json) is copied to a scratch folder, its records.jsonl
regenerated from its study.yaml and seed as `run-study --dry-run` does where the run has none (the blind text null
refits on the texts; without them it is skipped), and `leakaudit report` runs on the copy in a child process, at the
command's default counts unless --n-boot / --n-perm are given, --repeats times. Per run: the wall time and the step
times from the command's `[report] ... done in` lines, and the child's CPU seconds (user + system): on a machine
shared with other jobs the wall time stretches with their load, the CPU time much less, and at --threads 1 the report
runs on one core, so its CPU seconds are about the wall time it takes where it has a core to itself. --compare DIR
times another checkout's command on the same copy too (run from DIR, its leakaudit imported, e.g. a `git archive` of
an earlier commit), alternating with this one (A B B A ...) so a drift in the machine's load cancels.

    python bench/report_time.py                                # results/regime_math_prepared_e8_offline8_seed2
    python bench/report_time.py --compare /tmp/before --repeats 2 --threads 1
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

STEP = re.compile(r"^\[report\] (.+) done in ([0-9.]+) s$")
DEFAULT_RUN = benchlib.REPO / "results" / "regime_math_prepared_e8_offline8_seed2"


def regenerate_records(run: Path) -> int:
    """Write run/records.jsonl from its study.yaml and seed (nothing else is written); returns the record count."""
    from leakaudit.config import load_config
    from leakaudit.data.records import write_jsonl
    from leakaudit.study import Study

    with tempfile.TemporaryDirectory(prefix="report_time_") as tmp:  # a run directory that is never made
        cfg = dataclasses.replace(load_config(run / "study.yaml"), out_root=tmp)
        study = Study(cfg, log=lambda message: None, progress=False)
        study.prepare(start_executor=False)
        records = list(study.records().values())
    write_jsonl(records, run / "records.jsonl")
    return len(records)


def time_report(run: Path, checkout: Path, counts: list[str], threads: int | None) -> dict:
    """One `leakaudit report` of `run` run from `checkout` (its leakaudit imported): wall and CPU seconds, the step
    lines."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    cpu0, start = _children_cpu(), time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "leakaudit.cli", "report", str(run), *counts], env=env, cwd=checkout,
                         capture_output=True, text=True)  # cwd: `python -m` puts it first on the path
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu0
    if res.returncode != 0:
        raise SystemExit(f"leakaudit report failed ({checkout}):\n{res.stderr[-3000:]}")
    steps = {m.group(1): float(m.group(2)) for m in map(STEP.match, res.stderr.splitlines()) if m}
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "steps_s": steps,
            "loadavg_after": benchlib.load_average()}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summary(runs: list[dict]) -> dict:
    """Median wall, CPU and per-step seconds over the repeats, with every repeat's wall and CPU seconds."""
    names = dict.fromkeys(n for r in runs for n in r["steps_s"])
    return {"median_wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
            "median_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
            "wall_s": [r["wall_s"] for r in runs], "cpu_s": [r["cpu_s"] for r in runs],
            "loadavg_after": [r["loadavg_after"] for r in runs],
            "median_steps_s": {n: round(statistics.median(r["steps_s"][n] for r in runs if n in r["steps_s"]), 2)
                               for n in names}}


def main(argv: list[str] | None = None) -> dict:
    ap = benchlib.parser("report_time", __doc__)
    ap.add_argument("--run", type=Path, default=DEFAULT_RUN, help="a stored run (default: %(default)s)")
    ap.add_argument("--n-boot", type=int, default=None, help="passed to the command (default: its own)")
    ap.add_argument("--n-perm", type=int, default=None, help="passed to the command (default: its own)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--compare", type=Path, default=None, help="another checkout to time the same way")
    ap.add_argument("--note", default="", help="recorded with the params (e.g. what the compared checkout is)")
    args = ap.parse_args(argv)
    load = benchlib.load_average()
    counts = [*(["--n-boot", str(args.n_boot)] if args.n_boot is not None else []),
              *(["--n-perm", str(args.n_perm)] if args.n_perm is not None else [])]
    checkouts = {"this": benchlib.REPO, **({"compare": args.compare.resolve()} if args.compare else {})}
    runs: dict[str, list[dict]] = {k: [] for k in checkouts}
    with tempfile.TemporaryDirectory(prefix="report_time_run_") as tmp:
        copy = Path(tmp) / args.run.name
        shutil.copytree(args.run, copy)
        n_records = None if (copy / "records.jsonl").is_file() else regenerate_records(copy)
        order = list(checkouts)
        for i in range(args.repeats):
            for name in (order if i % 2 == 0 else order[::-1]):
                runs[name].append(time_report(copy, checkouts[name], counts, args.threads))
                print(name, runs[name][-1], flush=True)
    # records_regenerated None: the run's own records.jsonl
    metrics = {"records_regenerated": n_records, **{k: summary(v) for k, v in runs.items()}}
    benchlib.write_result(args.out, "report_time", params={**vars(args), "command_args": counts}, metrics=metrics,
                          load_before=load)
    return metrics


if __name__ == "__main__":
    main()
