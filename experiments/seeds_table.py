"""docs/results.md: none of its numbers (one design's seeds side by side, with the published statistics over all).

One sweep point over several seeds: each seed's pooled AUROCs beside the published statistics over all seeds'
targets together (a lead on one seed is checked on another before it is called a result).

Reads only the metrics.csv each run wrote (results/ keeps them after the run directories are gone):

    python experiments/seeds_table.py seed0=results/M_regime_math_prepared_metrics.csv \
        seed1=results/M1_regime_math_prepared_seed1_metrics.csv

Per seed: Leaky's pooled AUROC [record-cluster CI] (the report's domain row) and the strongest pooled attack of each
family. Over every seed's real targets: leakaudit.metrics.paper_statistics (mean per-target AUROC of Leaky / of the
strongest baseline per target / of the strongest same-trajectory baseline), the same on the null targets, and per
target whether Leaky beats 0.5 and beats the target's strongest fixed-text attack. Targets of one seed share records
and references, so the per-target counts are not independent draws; they are shown, not tested.
"""

from __future__ import annotations

import argparse
import json

import pandas as pd

from leakaudit.metrics import attack_base, paper_statistics


def load(named_paths: list[str]) -> pd.DataFrame:
    """NAME=PATH pairs -> one metrics table with a `seed` column and targets renamed NAME/target (so targets of
    different seeds stay distinct in paper_statistics' per-target groups)."""
    parts = []
    for item in named_paths:
        name, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=PATH, got {item!r}")
        m = pd.read_csv(path)
        m["seed"] = name
        m["target"] = m["target"].map(lambda t, n=name: t if pd.isna(t) else f"{n}/{t}")
        parts.append(m)
    return pd.concat(parts, ignore_index=True)


def per_seed_rows(m: pd.DataFrame) -> list[dict]:
    rows = []
    for seed, g in m[(m.level == "domain") & ~m.null_check.astype(bool)].groupby("seed", sort=False):
        row = {"seed": seed}
        for label, sel in (("leaky", g.attack == "leaky"),
                           ("best_fresh", (g.family == "fresh") & (g.attack.map(attack_base) != "leaky")),
                           ("best_fixed", g.family == "fixed"), ("blind", g.family == "blind")):
            best = g[sel].sort_values("auroc", ascending=False)
            if len(best):
                r = best.iloc[0]
                row[label] = f"{r.attack} {r.auroc:.3f} [{r.auroc_lo:.3f}, {r.auroc_hi:.3f}]"
        rows.append(row)
    return rows


def per_target_counts(m: pd.DataFrame) -> dict:
    """Over every seed's real targets: how many have Leaky > 0.5, and Leaky > the target's strongest fixed-text
    attack (max over family 'fixed' per target)."""
    t = m[(m.level == "target") & ~m.null_check.astype(bool)].dropna(subset=["auroc"])
    leaky = t[t.attack == "leaky"].set_index("target")["auroc"]
    fixed = t[t.family == "fixed"].groupby("target")["auroc"].max()
    return {"n_targets": int(len(leaky)), "leaky_above_0.5": int((leaky > 0.5).sum()),
            "leaky_above_strongest_fixed": int((leaky > fixed.reindex(leaky.index)).sum()),
            "leaky_per_target": {k: round(float(v), 3) for k, v in leaky.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="NAME=path/to/metrics.csv, one per seed")
    ap.add_argument("--out", default=None, help="also write the result as JSON here")
    args = ap.parse_args()
    m = load(args.runs)
    paper = paper_statistics(m)
    paper = paper[(paper.domain == "all") & (paper.design == "matched")]
    out = {"inputs": args.runs, "per_seed": per_seed_rows(m), "per_target": per_target_counts(m),
           "paper_statistics_all_seeds": paper.round(3).to_dict(orient="records")}
    print("| seed | Leaky | strongest same-trajectory | strongest fixed-text | blind |")
    print("|---|---|---|---|---|")
    for r in out["per_seed"]:
        print(f"| {r['seed']} | {r.get('leaky', '')} | {r.get('best_fresh', '')} | {r.get('best_fixed', '')} "
              f"| {r.get('blind', '')} |")
    for r in out["paper_statistics_all_seeds"]:
        kind = "null targets" if r["null_check"] else "real targets"
        print(f"\nas published, {r['n_targets']} {kind}: Leaky {r['leaky']:.3f} / strongest baseline "
              f"{r['strongest_baseline']:.3f} / strongest same-trajectory {r['strongest_fresh_baseline']:.3f}")
    c = out["per_target"]
    print(f"\nper target: Leaky > 0.5 on {c['leaky_above_0.5']}/{c['n_targets']}, above the strongest fixed-text "
          f"attack on {c['leaky_above_strongest_fixed']}/{c['n_targets']}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
