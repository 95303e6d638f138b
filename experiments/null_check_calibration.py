"""docs/results.md: none of its numbers; docs/guide/report.md's null-check calibration (AUROC sd 0.12 under no signal).

Is a failed null check a leak in the procedure or chance? (the null target of math, 8 passes, seed 1 gave Leaky
0.743 [0.535, 0.924] on 12 + 12 records.) Trains, samples and scores nothing.

Two measurements:

1. Coverage. The report's CI for one target is a stratified percentile bootstrap of the AUROC
   (leakaudit.metrics.roc_metrics). Under no signal (random scores, the labels of a null target) it should
   exclude 0.5 in 5% of runs; at 12 + 12 records a percentile bootstrap is known to run narrow. Simulated here
   with the report's own function and resample count, at every (n_pos, n_neg) the kept runs' null rows have.
2. Every kept run's null cells (metrics.json `null_check`, one row per attack): how many CIs exclude 0.5, on
   which side, against the simulated rate (a binomial test; the cells of one run share a null target and are
   correlated, so that test is optimistic about independence and only a rough guide), with each cell's exact
   two-sided Mann-Whitney p-value from scores.parquet (scipy.stats.mannwhitneyu, which is the AUROC's own test).
   The Leaky cells alone are listed, with their spread against the AUROC's standard deviation under H0,
   sqrt((n_pos + n_neg + 1) / (12 n_pos n_neg)).

    python experiments/null_check_calibration.py [results/*] [--json experiments/results/null_check_calibration.json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from leakaudit.metrics import attack_base, prepare, roc_metrics
from leakaudit.report import load_run

DEFAULT_RUNS = "results"
N_BOOT = 1000
"""The report's resample count (metrics.json `bootstrap.n_boot`)."""


def h0_auroc_sd(n_pos: int, n_neg: int) -> float:
    """Standard deviation of the AUROC (Mann-Whitney U / (n_pos n_neg)) under H0 with no ties."""
    return math.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg))


def simulated_exclusion_rate(n_pos: int, n_neg: int, *, n_sim: int, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """Fraction of `n_sim` no-signal draws (i.i.d. normal scores) whose report CI excludes 0.5, by side."""
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(n_pos, bool), np.zeros(n_neg, bool)]
    low = high = 0
    for i in range(n_sim):
        m = roc_metrics(y, rng.normal(size=len(y)), n_boot=n_boot, seed=i, alphas=())
        low += m["auroc_hi"] < 0.5
        high += m["auroc_lo"] > 0.5
    return {"n_pos": n_pos, "n_neg": n_neg, "n_sim": n_sim, "n_boot": n_boot,
            "rate": (low + high) / n_sim, "rate_below": low / n_sim, "rate_above": high / n_sim}


def exact_p(labels, scores) -> float:
    """Two-sided Mann-Whitney p-value of members' scores against non-members' (NaN = lowest, as in the report;
    exact without ties, else scipy's tie-corrected normal approximation)."""
    y, s, _ = prepare(labels, scores)
    return float(stats.mannwhitneyu(s[y], s[~y], alternative="two-sided", method="auto").pvalue)


def null_cells(run_dir: Path) -> pd.DataFrame:
    """One row per null-check cell of a kept run: label, AUROC [CI], counts, side it excludes 0.5 on, exact p."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    labelled = load_run(run_dir).labelled
    null = labelled[labelled["null_check"]]
    rows = []
    for cell in metrics.get("null_check", []):
        g = null[null["label"] == cell["label"]]
        lo, hi = cell["auroc_lo"], cell["auroc_hi"]
        side = None if lo is None or hi is None else ("above" if lo > 0.5 else "below" if hi < 0.5 else None)
        rows.append({"run": run_dir.name, "label": cell["label"], "family": cell["family"],
                     "auroc": cell["auroc"], "auroc_lo": lo, "auroc_hi": hi, "n_pos": cell["n_pos"],
                     "n_neg": cell["n_neg"], "n_targets": cell["n_targets"], "excludes_0.5": side,
                     "p_exact": exact_p(g["is_member"].astype(bool), g["score"]) if len(g) else float("nan")})
    return pd.DataFrame(rows)


def calibration(run_dirs: list[Path], *, n_sim: int, seed: int = 0) -> dict:
    """Both measurements over `run_dirs` (each with metrics.json and scores.parquet)."""
    cells = pd.concat([null_cells(d) for d in run_dirs], ignore_index=True)
    sizes = sorted({(int(a), int(b)) for a, b in zip(cells["n_pos"], cells["n_neg"])})
    coverage = [simulated_exclusion_rate(a, b, n_sim=n_sim, seed=seed) for a, b in sizes]
    rate = {(c["n_pos"], c["n_neg"]): c["rate"] for c in coverage}
    has_ci = cells["auroc_lo"].notna()
    expected = float(sum(rate[(int(a), int(b))] for a, b in zip(cells.n_pos[has_ci], cells.n_neg[has_ci])))
    n_out = int(cells["excludes_0.5"].notna().sum())
    n_cells = int(has_ci.sum())
    mean_rate = expected / n_cells if n_cells else float("nan")
    leaky = cells[cells["label"].map(attack_base) == "leaky"]
    z = (leaky["auroc"] - 0.5) / [h0_auroc_sd(a, b) for a, b in zip(leaky.n_pos, leaky.n_neg)]
    return {
        "runs": [d.name for d in run_dirs],
        "coverage": coverage,
        "cells": {"n": n_cells, "excluding_0.5": n_out,
                  "below": int((cells["excludes_0.5"] == "below").sum()),
                  "above": int((cells["excludes_0.5"] == "above").sum()),
                  "expected_by_chance": expected,
                  "binomial_p_two_sided": float(stats.binomtest(n_out, n_cells, mean_rate).pvalue) if n_cells else None,
                  "exact_p_below_0.05": int((cells["p_exact"] < 0.05).sum())},
        "leaky": {"n": int(len(leaky)), "auroc_mean": float(leaky["auroc"].mean()),
                  "auroc_sd": float(leaky["auroc"].std(ddof=1)),
                  "h0_sd": [h0_auroc_sd(int(a), int(b)) for a, b in sorted(set(zip(leaky.n_pos, leaky.n_neg)))],
                  "z_rms": float(np.sqrt(np.mean(np.square(z)))),
                  "excluding_0.5": int(leaky["excludes_0.5"].notna().sum()),
                  "rows": leaky[["run", "label", "auroc", "auroc_lo", "auroc_hi", "p_exact"]].to_dict("records")},
        "outside": cells[cells["excludes_0.5"].notna()][["run", "label", "auroc", "auroc_lo", "auroc_hi",
                                                         "excludes_0.5", "p_exact"]].to_dict("records"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help=f"kept runs (default: every folder of {DEFAULT_RUNS})")
    ap.add_argument("--n-sim", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # folders with both files: the pooled reports (CFP, CFP3) re-read the null targets of per-domain runs and keep
    # no scores.parquet, so counting them would count those null targets twice
    runs = args.runs or sorted(p for p in Path(DEFAULT_RUNS).iterdir()
                               if (p / "metrics.json").is_file() and (p / "scores.parquet").is_file())
    out = calibration(runs, n_sim=args.n_sim, seed=args.seed)
    if args.json:  # before printing: a closed stdout (| head) must not lose the measurement
        args.json.write_text(json.dumps(out, indent=1, default=float) + "\n")
    for c in out["coverage"]:
        print(f"coverage {c['n_pos']}+{c['n_neg']}: the report CI excludes 0.5 under no signal in "
              f"{c['rate']:.3f} of {c['n_sim']} draws (below {c['rate_below']:.3f}, above {c['rate_above']:.3f})")
    k = out["cells"]
    print(f"null cells: {k['excluding_0.5']} of {k['n']} exclude 0.5 ({k['below']} below, {k['above']} above); "
          f"{k['expected_by_chance']:.1f} expected at the simulated rate (binomial p {k['binomial_p_two_sided']:.2f}); "
          f"exact Mann-Whitney p < 0.05 in {k['exact_p_below_0.05']}")
    lk = out["leaky"]
    print(f"Leaky null cells: {lk['n']}, mean AUROC {lk['auroc_mean']:.3f}, sd {lk['auroc_sd']:.3f} "
          f"(H0 sd {', '.join(f'{s:.3f}' for s in lk['h0_sd'])}; rms z {lk['z_rms']:.2f}), "
          f"{lk['excluding_0.5']} exclude 0.5")
    for r in out["outside"]:
        print(f"  {r['run']:45s} {r['label']:18s} {r['auroc']:.3f} [{r['auroc_lo']:.3f}, {r['auroc_hi']:.3f}] "
              f"{r['excludes_0.5']}, exact p {r['p_exact']:.3f}")


if __name__ == "__main__":
    main()
