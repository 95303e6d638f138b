"""docs/results.md: none of its numbers (the audit verdict's power and size on the stored study runs; a diagnostic).

How often would the audit's verdict (leakaudit.verdict) say "used" on the stored study runs? Trains, samples and
scores nothing: each target of each kept run is audited as if unlabelled, from its stored scores.

Per target (a student, or a null student with its label source's labels) and per split (a seeded draw): the null
sample is a random half of the target's non-members (no reference and not the target trained on them), the
candidates are all its members plus the other non-members. On these the verdict's primary attack (Leaky with offline
references, `leaky@offline`, where the run has them; else Leaky with matched references) gives the global one-sided
Mann-Whitney p-value and the BH list at FDR 0.1. Reported per run and domain: the share of (target, split) pairs
whose global p < 0.05 (power for real targets; the test's size for null targets), the median p, the members and
non-members flagged, and the smallest p-value the null sample allows (which is why nothing can be flagged with a
null sample of 6).

    python experiments/verdict_power.py [results/*] [--splits 200] [--json experiments/results/verdict_power.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from leakaudit.verdict import DEFAULT_FDR, GLOBAL_ALPHA, conformal_p_values, flag, global_test, smallest_p

DEFAULT_RUNS = "results"
PRIMARY = ("leaky@offline", "leaky")
"""The primary attack's label in a study's scores, in order of preference (offline references first)."""


def target_rows(scores: pd.DataFrame) -> tuple[str, pd.DataFrame] | None:
    """(the primary label used, its rows) of one run, or None without Leaky."""
    for label in PRIMARY:
        rows = scores[scores.attack == label]
        if not rows.empty:
            return label, rows
    return None


def audit_target(rows: pd.DataFrame, *, splits: int, seed: int) -> dict:
    """The verdict on one target's rows (record_id, score, is_member) under `splits` random null/candidate splits."""
    y = rows.is_member.astype(bool).to_numpy()
    s = rows.score.to_numpy(dtype=float)
    members, non = s[y], s[~y]
    rng = np.random.default_rng(seed)
    ps, fm, fn = [], [], []
    n_null = len(non) // 2
    for _ in range(splits):
        order = rng.permutation(len(non))
        null, rest = non[order[:n_null]], non[order[n_null:]]
        cand = np.r_[members, rest]
        ps.append(global_test(cand, null, n_boot=0)["p_value"])
        f = flag(conformal_p_values(cand, null), fdr=DEFAULT_FDR)
        fm.append(int(f[:len(members)].sum()))
        fn.append(int(f[len(members):].sum()))
    ps = np.array(ps)
    return {"n_members": int(len(members)), "n_candidate_non_members": int(len(non) - n_null), "n_null": n_null,
            "smallest_p": smallest_p(n_null), "rejects": float((ps < GLOBAL_ALPHA).mean()),
            "median_p": float(np.median(ps)), "flagged_members": float(np.mean(fm)),
            "flagged_non_members": float(np.mean(fn))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*")
    ap.add_argument("--splits", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = [Path(r) for r in args.runs] or sorted(p for p in Path(DEFAULT_RUNS).iterdir()
                                                 if (p / "scores.parquet").is_file())
    out = []
    for run in runs:
        scores = pd.read_parquet(run / "scores.parquet")
        found = target_rows(scores)
        if found is None:
            continue
        label, rows = found
        for (target, domain, null_check), g in rows.groupby(["target", "domain", "null_check"], sort=True):
            if g.is_member.isna().any() or g.is_member.nunique() < 2:
                continue
            r = audit_target(g, splits=args.splits, seed=args.seed)
            out.append({"run": run.name, "attack": label, "target": target, "domain": domain,
                        "null_check": bool(null_check), **r})
    table = pd.DataFrame(out)
    summary = (table.groupby(["run", "domain", "null_check"])
               .agg(targets=("target", "size"), attack=("attack", "first"), rejects=("rejects", "mean"),
                    median_p=("median_p", "median"), flagged_members=("flagged_members", "mean"),
                    flagged_non_members=("flagged_non_members", "mean"), n_null=("n_null", "first"),
                    smallest_p=("smallest_p", "first"))
               .reset_index())
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(summary.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if args.json:
        args.json.write_text(json.dumps({"splits": args.splits, "seed": args.seed, "fdr": DEFAULT_FDR,
                                         "alpha": GLOBAL_ALPHA, "summary": summary.to_dict(orient="records"),
                                         "targets": out}, indent=2) + "\n")


if __name__ == "__main__":
    main()
