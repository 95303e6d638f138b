"""docs/results.md, What moved what: 16 trajectories change nothing; two halves of 8 correlate 0.97 within targets.

How the same-trajectory attacks grow with the number of fresh trajectories per record, on a finished run's stored
signals (is Leaky below the fixed-text attacks because it reads too few of the target's samples?).
Trains, samples and scores nothing.

For k = 1 .. n (n = the trajectories the run sampled per record) every record keeps its first k trajectories
(the signals stage draws them independently, so the first k are a sample of k), and Leaky (the run's own
parameters), fresh_gap_max and fresh_loss are re-run on every real target; each row is the pooled AUROC [95% CI]
per domain. The fixed-text attacks do not read the trajectories: the run's best fixed-text AUROC (metrics.csv) is
printed beside as the line to cross. A curve still rising at k = n says more trajectories would help; a flat one
says the budget is not what holds Leaky back. Read it on the development seed.

    python experiments/trajectory_curve.py runs/sweep/regime_code_prepared_e8_seed1 [--json experiments/results/trajectory_curve_....json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pandas as pd

from leakaudit.assemble import run_inputs
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MATCHED, MembershipPlan
from leakaudit.metrics import auroc, summarise
from leakaudit.rundir import RunDir
from leakaudit.scoring import attack_rows, attack_specs

SAME_TRAJECTORY = ("leaky", "fresh_gap_max", "fresh_loss")
FRESH_FIELDS = ("fresh_target", "fresh_refs", "fresh_base")


def trajectories(inputs, keep: slice):
    """AttackInputs with every record's fresh signals cut to the trajectories `keep` selects (fields it lacks stay
    None)."""
    cut = {f: [per_record[keep] for per_record in getattr(inputs, f)] for f in FRESH_FIELDS
           if getattr(inputs, f) is not None}
    return dataclasses.replace(inputs, **cut)


def first_k(inputs, k: int):
    """AttackInputs with every record's fresh signals cut to its first k trajectories."""
    return trajectories(inputs, slice(0, k))


def _real_views(run: RunDir):
    """(the same-trajectory attack specs, [(view, AttackInputs)] of the run's real targets with matched references)."""
    cfg = load_config(path=run.config)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    specs = [a for a in attack_specs(cfg.attacks) if a.name in SAME_TRAJECTORY]
    views = [(v, i) for v, i in run_inputs(run, plan, records, cfg.plan.n_matched_references)
             if not v.null_check and v.references == MATCHED]
    return specs, views


def split_half(specs, views) -> pd.DataFrame:
    """How much of a same-trajectory score is the record and how much the draw of its trajectories: each attack run
    on the first and on the second half of every record's trajectories separately (disjoint draws from the same
    target), per domain the Pearson and Spearman correlation of the two halves' scores over all (target, record)
    rows and the Pearson correlation within targets (each score less its target's mean), the Spearman-Brown
    reliability of the whole set (2r / (1 + r)) and each half's pooled AUROC (specs, views: _real_views). A reliability
    near 1 says the score is already a property of the record and its references, so more trajectories cannot move
    the AUROC much; a low one says sampling noise dilutes it."""
    n = min(len(t) for _, i in views for t in i.fresh_target)
    halves = []
    for half, keep in (("first", slice(0, n // 2)), ("second", slice(n // 2, 2 * (n // 2)))):
        for view, inputs in views:
            rows = attack_rows(trajectories(inputs, keep), specs, target=view.target, domain=view.domain,
                               label_source=view.label_source, log=lambda *_: None)
            halves.append(rows.assign(half=half))
    wide = pd.concat(halves).pivot_table(index=["domain", "attack", "target", "record_id", "is_member"],
                                         columns="half", values="score").reset_index()
    return half_agreement(wide).assign(trajectories_per_half=n // 2)


def half_agreement(wide: pd.DataFrame) -> pd.DataFrame:
    """Per (domain, attack) of `wide` (one row per target and record: columns first, second = the two halves'
    scores, is_member): rows, pearson_r, spearman_r, pearson_r_within_target, reliability_whole, auroc_first,
    auroc_second (see split_half)."""
    out = []
    for (domain, attack), g in wide.groupby(["domain", "attack"]):
        r = float(g["first"].corr(g["second"]))
        # within a target: each half's score less its target's mean, so targets that sit apart as a whole (a weak
        # reference set lifts every record of a target) do not carry the correlation
        centred = g[["first", "second"]] - g.groupby("target")[["first", "second"]].transform("mean")
        out.append({"domain": domain, "attack": attack, "rows": len(g), "pearson_r": r,
                    "spearman_r": float(g["first"].corr(g["second"], method="spearman")),
                    "pearson_r_within_target": float(centred["first"].corr(centred["second"])),
                    "reliability_whole": 2 * r / (1 + r),
                    "auroc_first": auroc(g["is_member"].to_numpy(), g["first"].to_numpy()),
                    "auroc_second": auroc(g["is_member"].to_numpy(), g["second"].to_numpy())})
    return pd.DataFrame(out)


def curve(run: RunDir, specs, views, n_boot: int = 1000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per k and domain: attack, auroc, CI; the run's best fixed-text attack per domain from metrics.csv)."""
    n = max(len(t) for _, i in views for t in i.fresh_target)
    frames = []
    for k in range(1, n + 1):
        for view, inputs in views:
            rows = attack_rows(first_k(inputs, k), specs, target=view.target, domain=view.domain,
                               label_source=view.label_source, log=lambda *_: None)
            frames.append(rows.assign(k=k))
    scores = pd.concat(frames, ignore_index=True)
    out = []
    for k, g in scores.groupby("k"):
        m = summarise(g.drop(columns="k"), n_boot=n_boot, seed=0)
        out.append(m[m.level == "domain"].assign(k=k)[["k", "domain", "attack", "auroc", "auroc_lo", "auroc_hi"]])
    head = pd.DataFrame(json.loads((run.root / "metrics.json").read_text())["headline"])  # the report's own pick
    best_fixed = head[(head.method == "best OUT-only baseline") & (head.domain != "all")]
    return pd.concat(out, ignore_index=True), best_fixed[["domain", "attack", "auroc", "auroc_lo", "auroc_hi"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    run = RunDir(args.run_dir)
    specs, views = _real_views(run)  # the stored signals, read once for both tables
    table, best_fixed = curve(run, specs, views)
    wide = table.assign(cell=[f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in
                              zip(table.auroc, table.auroc_lo, table.auroc_hi)])
    print(wide.pivot_table(index=["domain", "k"], columns="attack", values="cell", aggfunc="first").to_string())
    for r in best_fixed.itertuples():
        print(f"{r.domain}: best fixed-text attack {r.attack} {r.auroc:.3f} [{r.auroc_lo:.3f}, {r.auroc_hi:.3f}]")
    halves = split_half(specs, views)
    print(halves.round(3).to_string(index=False))
    if args.json:
        args.json.write_text(json.dumps({"run": str(args.run_dir), "curve": table.round(4).to_dict(orient="records"),
                                         "best_fixed": best_fixed.round(4).to_dict(orient="records"),
                                         "split_half": halves.round(4).to_dict(orient="records")}, indent=1)
                             + "\n")


if __name__ == "__main__":
    main()
