"""The achievable matmul peak of this CPU, fp32 and bf16: the yardstick for "achieved FLOP/s as a fraction of peak".

Measures torch.matmul of square n x n matrices (2 n^3 FLOPs each) in float32 and bfloat16, best of a few
repetitions after one warm-up per size, at --threads intra-op threads (default: torch's own count), and writes
bench/results/peak_<cpu-tag>.json (bench/benchlib.py's schema, every recorded run in metrics["runs"]): per run the
CPU record of leakaudit.envinfo.cpu_info (model, cores, ISA flags, bf16_native, torch's capability), GFLOP/s per
dtype and size, the best per dtype, the date, and the load average before and after (these machines are shared and
noisy: a peak measured under load is a lower bound). One file per CPU tag; a run replaces the earlier run of the
same thread count and mode, and keeps the others.

Other benchmarks import `peak(dtype, threads)` (FLOP/s) from here:

    from bench_peak import peak     # a sibling: bench/ is on the path of a script run from it
    fraction = achieved_flops_per_s / peak("bfloat16", threads=torch.get_num_threads())

Run:  OMP_NUM_THREADS=1 python bench/bench_peak.py --quick --threads 1      (< 20 s)
      python bench/bench_peak.py --threads 2                                  (sizes 1024-4096, ~1-2 min)
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import benchlib

RESULTS = Path(__file__).resolve().parent / "results"
DTYPES = ("float32", "bfloat16")
QUICK = {"sizes": (1024, 2048), "reps": 3}
FULL = {"sizes": (1024, 2048, 3072, 4096), "reps": 5}


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def matmul_gflops(dtype: str, n: int, reps: int, clock=time.perf_counter) -> float:
    """Best-of-`reps` GFLOP/s of torch.matmul on random n x n `dtype` matrices (after one warm-up product), timed by
    `clock` (wall clock by default; time.process_time gives the peak per CPU second of a shared core)."""
    import torch

    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=gen).to(dt)
    b = torch.randn(n, n, generator=gen).to(dt)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(reps):
        start = clock()
        torch.matmul(a, b)
        best = min(best, clock() - start)
    return 2.0 * n ** 3 / best / 1e9


def measure(threads: int | None = None, *, quick: bool = False, sizes: tuple[int, ...] | None = None,
            reps: int | None = None, dtypes: tuple[str, ...] = DTYPES) -> dict[str, Any]:
    """One peak run: {'threads', 'quick', 'sizes', 'reps', 'gflops': {dtype: {str(n): GFLOP/s}},
    'best_gflops': {dtype: max over sizes}, 'bf16_over_fp32', 'date', 'loadavg_before', 'loadavg_after',
    'seconds', 'cpu': cpu_info()}. Restores torch's thread count afterwards."""
    import torch

    from leakaudit.envinfo import cpu_info

    mode = QUICK if quick else FULL
    sizes = tuple(sizes or mode["sizes"])
    reps = int(reps or mode["reps"])
    before_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        load_before = _loadavg()
        start = time.perf_counter()
        gflops = {dt: {str(n): round(matmul_gflops(dt, n, reps), 2) for n in sizes} for dt in dtypes}
        seconds = round(time.perf_counter() - start, 2)
        run = {"threads": torch.get_num_threads(), "quick": quick, "sizes": list(sizes), "reps": reps,
               "gflops": gflops, "best_gflops": {dt: max(v.values()) for dt, v in gflops.items()},
               "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "loadavg_before": load_before, "loadavg_after": _loadavg(), "seconds": seconds,
               "cpu": cpu_info()}
    finally:
        torch.set_num_threads(before_threads)
    best = run["best_gflops"]
    if "float32" in best and "bfloat16" in best and best["float32"] > 0:
        run["bf16_over_fp32"] = round(best["bfloat16"] / best["float32"], 2)
    return run


def results_path(tag: str | None = None, results_dir: Path = RESULTS) -> Path:
    from leakaudit.envinfo import cpu_info

    return Path(results_dir) / f"peak_{tag or cpu_info()['tag']}.json"


def save_run(run: dict[str, Any], *, note: str | None = None, path: Path | None = None,
             params: dict[str, Any] | None = None) -> Path:
    """Write `run` into `path` (default: peak_<tag>.json in bench/results/), bench/benchlib.py's schema with every
    recorded run as metrics["runs"], replacing an earlier run with the same threads and quick flag."""
    path = Path(path) if path is not None else results_path(run["cpu"]["tag"])
    runs = [r for r in _runs(path) if (r.get("threads"), r.get("quick")) != (run["threads"], run["quick"])]
    if note:
        run = {**run, "note": note}
    runs.append(run)
    runs.sort(key=lambda r: (r["threads"], r["quick"]))
    metrics = {"what": "torch.matmul of square n x n matrices, 2 n^3 FLOPs, best of `reps` after one warm-up; "
                       "GFLOP/s per dtype and size (bench/bench_peak.py)",
               "cpu_tag": run["cpu"]["tag"], "runs": runs}
    benchlib.write_result(path, "peak", params=params or {}, metrics=metrics, load_before=run["loadavg_before"])
    return path


def _runs(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["metrics"]["runs"] if path.is_file() else []


def load_peaks(tag: str | None = None, results_dir: Path = RESULTS) -> list[dict[str, Any]]:
    """The recorded runs for this CPU tag (or `tag`); [] when none."""
    return _runs(results_path(tag, results_dir))


_MEASURED: dict[tuple[str, int], float] = {}


def peak(dtype: Any = "bfloat16", threads: int | None = None, *, results_dir: Path = RESULTS,
         measure_if_missing: bool = True) -> float:
    """Best matmul FLOP/s (not GFLOP/s) in `dtype` ('float32'/'bfloat16' or a torch dtype) at `threads`
    (default: torch's current count) on this CPU.

    Read from bench/results/peak_<tag>.json when a run at that thread count is recorded (a full run preferred to
    a --quick one, then the latest); otherwise measured now with the quick settings (cached in-process, not
    written) when `measure_if_missing`, else KeyError."""
    import torch

    name = str(dtype).replace("torch.", "")
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    threads = int(threads or torch.get_num_threads())
    runs = [r for r in load_peaks(None, results_dir) if r.get("threads") == threads and name in r["best_gflops"]]
    if runs:
        runs.sort(key=lambda r: (not r.get("quick", False), r.get("date", "")))
        return float(runs[-1]["best_gflops"][name]) * 1e9
    if not measure_if_missing:
        raise KeyError(f"no recorded {name} peak at {threads} threads in {results_path(None, results_dir)}")
    key = (name, threads)
    if key not in _MEASURED:
        _MEASURED[key] = measure(threads, quick=True, dtypes=(name,))["best_gflops"][name] * 1e9
    return _MEASURED[key]


def main(argv: list[str] | None = None) -> int:
    ap = benchlib.parser("peak", __doc__)
    ap.set_defaults(out=None)
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK['sizes']}, {QUICK['reps']} reps (< 20 s)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="override the square sizes")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--note", default=None, help="free text stored with the run (e.g. what else was running)")
    ap.add_argument("--no-save", action="store_true", help="print only")
    args = ap.parse_args(argv)
    run = measure(args.threads, quick=args.quick, sizes=tuple(args.sizes) if args.sizes else None, reps=args.reps)
    cpu = run["cpu"]
    print(f"cpu: {cpu['model_name']} | tag {cpu['tag']} | torch {cpu['torch_capability']} | bf16 native "
          f"{cpu['bf16_native']} | flags {[f for f, on in cpu['flags'].items() if on]}")
    print(f"threads {run['threads']}, reps {run['reps']}, load average {run['loadavg_before']} -> "
          f"{run['loadavg_after']}, {run['seconds']} s")
    print(f"{'n':>6} " + " ".join(f"{dt:>10}" for dt in run["gflops"]) + "   (GFLOP/s)")
    for n in run["sizes"]:
        print(f"{n:>6} " + " ".join(f"{run['gflops'][dt][str(n)]:>10.1f}" for dt in run["gflops"]))
    print(f"  best " + " ".join(f"{run['best_gflops'][dt]:>10.1f}" for dt in run["gflops"])
          + (f"   bf16/fp32 = {run['bf16_over_fp32']}" if "bf16_over_fp32" in run else ""))
    if not args.no_save:
        print("wrote", save_run(run, note=args.note, path=args.out, params=vars(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
