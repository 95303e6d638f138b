"""Benchmark: a model's fresh scoring one target at a time (score_fresh per target, the signals stage before
score_fresh_all) against all its targets in one call (score_fresh_all: a record's prompt, the same in every target's
directory, runs once per batch of its trajectories instead of once per target).

On a finished run's stored trajectories: for each `--models` model, the (target, record ids) pairs the study gives it
(Study.fresh_scorers), each path timed in a scratch copy of those fresh directories (trajectories only), at
`--threads` torch threads (1 = what a job gets with execution.local_workers 2 on 2 cores), the two paths alternated
(per-target, shared, shared, per-target) so a drift in the machine's load cancels. Also the largest difference
between the two paths' log-probs (float rounding: the batches differ). Writes bench/benchlib.py's schema.

    python bench/bench_score_sharing.py --run runs/default --models base,code-s0 --out bench/results/score_sharing.json
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import benchlib


def _scratch(run_fresh: Path, targets: list[str], at: Path) -> dict[str, Path]:
    """Copies of the targets' fresh directories holding the trajectories only (no log-probs, no DONE)."""
    out = {}
    for t in targets:
        d = at / t
        d.mkdir(parents=True)
        for f in (run_fresh / t).iterdir():
            if f.is_file() and not f.name.startswith("logp__") and f.name != "DONE":
                shutil.copy2(f, d / f.name)
        out[t] = d
    return out


def main() -> None:
    from leakaudit.config import load_config
    from leakaudit.rundir import RunDir
    from leakaudit.signals.stages import score_fresh, score_fresh_all
    from leakaudit.signals.store import load_logp
    from leakaudit.study import Study

    ap = benchlib.parser("score_sharing", __doc__)
    ap.set_defaults(threads=1)
    ap.add_argument("--run", required=True, type=Path)
    ap.add_argument("--models", default="base", help="comma-separated model ids")
    args = ap.parse_args()
    benchlib.apply_threads(args)
    load = benchlib.load_average()

    cfg = load_config(RunDir(args.run).config)
    study = Study(cfg, progress=False, log=lambda m: None)
    plan = study.plan()
    targets = [v.target for v in plan.views()]
    scorers = study.fresh_scorers(targets)
    results = {}
    for model_id in args.models.split(","):
        todo = [(t, ids) for t in targets for m, ids in scorers[t].items() if m == model_id]
        times: dict[str, list[float]] = {"per_target": [], "shared": []}
        logps: dict[str, dict] = {}
        with study._backend(model_id) as backend:
            for path in ("per_target", "shared", "shared", "per_target"):
                with tempfile.TemporaryDirectory() as tmp:
                    dirs = _scratch(study.run.root / "signals" / "fresh", [t for t, _ in todo], Path(tmp))
                    start = time.perf_counter()
                    if path == "per_target":
                        n = sum(score_fresh(backend, model_id, dirs[t], record_ids=ids) for t, ids in todo)
                    else:
                        n = score_fresh_all(backend, model_id, [(dirs[t], ids) for t, ids in todo])
                    times[path].append(round(time.perf_counter() - start, 2))
                    logps[path] = {t: load_logp(dirs[t], model_id) for t, _ in todo}
        diff = 0.0
        for t, _ in todo:
            for rid, rows in logps["per_target"][t].items():
                for a, b in zip(rows, logps["shared"][t][rid]):
                    scored = ~np.isnan(a)
                    assert (scored == ~np.isnan(b)).all(), (t, rid)
                    if scored.any():
                        diff = max(diff, float(np.abs(a[scored] - b[scored]).max()))
        per, shared = statistics.mean(times["per_target"]), statistics.mean(times["shared"])
        results[model_id] = {"targets": len(todo), "tokens": n, "seconds": times, "speedup": round(per / shared, 3),
                             "max_abs_logp_diff": diff}
        print(model_id, results[model_id], flush=True)
    benchlib.write_result(args.out, "score_sharing", params=vars(args), metrics={"models": results},
                          load_before=load)


if __name__ == "__main__":
    main()
