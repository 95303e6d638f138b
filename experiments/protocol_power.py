"""docs/results.md, "What the test can show": how often a test of K targets shows a lead of the size a development
run (or several pooled) measured, by each half of docs/protocol.md's decision rule and by both.

A simulated test draws K target slots with replacement from the development run's real targets (each target keeps
its candidates, labels and scores) and is read as the test seeds are: the mean per-target AUROC of PRIMARY minus
VERSUS, with its 95% two-level bootstrap CI (leakaudit.per_target.two_level_bootstrap); the lead is shown when the
CI's lower end is above 0. The share of simulated tests that show it is the test's power IF the development run's
targets were the population, i.e. with the development lead taken as the truth, which it is not (its own CI is
wide). A duplicated target carries the same record draw twice, so the simulation is, if anything, pessimistic.
Also printed: the smallest lead a test of K targets would show with 80% power by the normal approximation on the SD
of the per-target differences (a lower bound: the rule's CI also resamples records inside each target). The TPR half
is read on the same simulated tests: the drawn targets' scores, each target's robust z-scored within it (label-free,
leakaudit.metrics.normalise_within_target, as the rule reads them), pooled under one threshold, and PRIMARY's TPR at 1%
FPR compared with VERSUS's. The rule needs both halves. Trains, samples and scores nothing.

    python experiments/protocol_power.py results/protocol-dev-code-plan-seed8 --versus fresh_gap_max \
        --targets 8 16 --json experiments/results/protocol_power_code.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

import pool_runs  # a sibling: experiments/ is on the path of a script run from it
from leakaudit.errors import InputError
from leakaudit.metrics import normalise_scores, normalise_within_target
from leakaudit.per_target import per_target_auroc, target_matrices, two_level_bootstrap


def per_target_differences(targets) -> np.ndarray:
    """[K]: per target, AUROC of row 0 minus AUROC of row 1 (targets' scores hold [primary, versus])."""
    auc = per_target_auroc(targets)
    return auc[0] - auc[1]


def low_fpr_lead(targets, alpha: float = 0.01) -> bool:
    """Row 0's TPR at `alpha` FPR above row 1's, with one threshold over the targets' scores pooled (give targets
    whose scores are normalised within each target, as the rule reads them)."""
    return pool_runs.pooled_tpr_gap(targets, alpha) > 0


def simulated_readings(targets, *, k: int, sims: int, n_boot: int, seed: int, level: float = 0.95,
                       alpha: float = 0.01) -> dict[str, float]:
    """Shares of `sims` simulated tests of `k` target slots (drawn with replacement from `targets`) that show the
    lead by the AUROC half (the two-level bootstrap CI of mean(primary − versus) above 0), by the low-FPR half
    (low_fpr_lead), and by both."""
    rng = np.random.default_rng(seed)
    tail = (1 - level) / 2 * 100
    shown = np.zeros(3)
    for s in range(sims):
        drawn = [targets[i] for i in rng.integers(0, len(targets), size=k)]
        boot = two_level_bootstrap(drawn, n_boot=n_boot, seed=seed + 1 + s).mean(axis=2)    # [2, B]
        auroc, low = np.percentile(boot[0] - boot[1], tail) > 0, low_fpr_lead(drawn, alpha)
        shown += (auroc, low, auroc and low)
    return dict(zip(("auroc", "low_fpr", "both"), (shown / sims).tolist()))


def simulated_power(targets, *, k: int, sims: int, n_boot: int, seed: int, level: float = 0.95) -> float:
    """The AUROC half of simulated_readings: the share of simulated tests whose paired CI lies above 0."""
    return simulated_readings(targets, k=k, sims=sims, n_boot=n_boot, seed=seed, level=level)["auroc"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dev_runs", nargs="+", type=Path, help="development run(s); several are pooled as pool_runs does")
    ap.add_argument("--primary", default="leaky@offline")
    ap.add_argument("--versus", required=True, help="the comparator the protocol fixed for the test seeds")
    ap.add_argument("--targets", type=int, nargs="+", default=[16])
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        scores = normalise_scores(pool_runs.pooled_scores(args.dev_runs))  # within-target z-scores below
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)  # the project's code for bad input; nothing has been written
    labels = [args.primary, args.versus]
    missing = sorted(set(labels) - set(scores["label"]))
    if missing:
        print(f"error: {', '.join(str(d / 'scores.parquet') for d in args.dev_runs)}: no attack {missing} "
              f"(has {sorted(set(scores['label']))})", file=sys.stderr)
        sys.exit(2)
    # monotone within each target, so every per-target AUROC is the raw scores' (the low-FPR half needs the z-scores)
    targets = target_matrices(normalise_within_target(scores[scores["label"].isin(labels)]), labels)
    diff = per_target_differences(targets)
    sd = float(diff.std(ddof=1)) if len(diff) > 1 else float("nan")  # one target has no spread
    z = norm.ppf(0.975) + norm.ppf(0.80)
    rows = []
    for k in args.targets:
        shown = simulated_readings(targets, k=k, sims=args.sims, n_boot=args.n_boot, seed=args.seed)
        rows.append({"targets": k, "power_at_dev_lead": shown["auroc"], "low_fpr_half_at_dev": shown["low_fpr"],
                     "both_halves_at_dev": shown["both"], "lead_shown_80pct_normal_approx": float(z * sd / np.sqrt(k))})
    out = {"dev_runs": [str(d) for d in args.dev_runs], "primary": args.primary, "versus": args.versus,
           "dev_targets": len(targets), "dev_lead": float(diff.mean()), "sd_per_target_difference": sd,
           "dev_low_fpr_lead": bool(low_fpr_lead(targets)),
           "per_target_difference": [round(float(d), 4) for d in diff], "sims": args.sims, "n_boot": args.n_boot,
           "seed": args.seed, "by_targets": rows}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{', '.join(d.name for d in args.dev_runs)}: {args.primary} − {args.versus} over {len(targets)} targets: "
          f"lead {diff.mean():+.3f}, SD of per-target differences {sd:.3f}")
    for r in rows:
        print(f"  {r['targets']:3d} targets: the AUROC half shows the development lead {r['power_at_dev_lead']:.0%} of "
              f"the time, the TPR@1% half {r['low_fpr_half_at_dev']:.0%}, both {r['both_halves_at_dev']:.0%}; 80% "
              f"power (AUROC half) needs a lead of at least {r['lead_shown_80pct_normal_approx']:.3f}")


if __name__ == "__main__":
    main()
