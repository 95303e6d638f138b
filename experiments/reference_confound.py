"""docs/results.md: none of its numbers; docs/guide/report.md's design check (reference identity vs membership).

Is a reference-gap attack's AUROC about membership, or about WHICH reference each record got? Reads a finished run.

With M students per domain and a keep matrix in which every record is IN for M/2 of them, the matched OUT
reference of a record (k = 1 when M = 4) is drawn from the students that did not train on it. For a target's
non-members most other students are IN, so the OUT reference is nearly forced; for its members it is drawn from
the others. Which student serves as reference is then correlated with the label, and students differ from one
another by large per-model offsets (log p of the target's samples), so the gap target - reference can separate
the labels through reference identity alone. The null target (trained on no candidate) makes this visible:
nothing about membership is in its weights.

Per target (fresh trajectories, the stored signals of the run, nothing recomputed):
- auroc_gap: AUROC of the mean per-token gap target - matched OUT reference (fresh_gap_max with k = 1);
- auroc_ref_identity: AUROC of a score that knows only which reference a record got: the mean gap of the OTHER
  records that share its reference (leave-one-out); far from 0.5 means reference identity alone separates;
- auroc_within_reference: the AUROC restricted to (member, non-member) pairs that share the same reference
  (a stratified Mann-Whitney statistic), with the number of such pairs: the part of the gap that reference
  identity cannot explain;
- refs: for members and non-members, how many records got each reference.

    python experiments/reference_confound.py runs/default [--json experiments/results/reference_confound.json]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from leakaudit.membership import MembershipPlan
from leakaudit.rundir import RunDir
from leakaudit.signals.store import load_logp


def mean_logp(logps: list[np.ndarray]) -> float:
    """Mean over non-empty trajectories of the mean per-token log p (nats/token)."""
    return float(np.mean([lp.mean() for lp in logps if len(lp)]))


def within_reference_auroc(gaps: np.ndarray, labels: np.ndarray, refs: list[str]) -> tuple[float, int]:
    """P(gap_member > gap_nonmember) + 0.5 P(tie) over pairs with the same reference; (nan, 0) if no pair."""
    wins, pairs = 0.0, 0
    for ref in set(refs):
        idx = np.array([r == ref for r in refs])
        pos, neg = gaps[idx & labels], gaps[idx & ~labels]
        if len(pos) and len(neg):
            diff = pos[:, None] - neg[None, :]
            wins += float((diff > 0).sum() + 0.5 * (diff == 0).sum())
            pairs += diff.size
    return (wins / pairs if pairs else float("nan")), pairs


def analyse(run_root: Path, k_refs: int = 1) -> dict:
    run = RunDir(run_root)
    plan = MembershipPlan.load(run.plan_dir)
    out = {}
    for view in plan.views():
        labels_map = plan.labels(view.label_source)
        matched = plan.matched_references(view, 0, k_refs)
        outs = {rid: list(refs) for rid, refs in zip(matched.record_ids, matched.outs)}
        logps = {m: load_logp(run.fresh(view.target), m)
                 for m in {view.target, *(m for chosen in outs.values() for m in chosen)}}
        ids = plan.candidates[view.domain]
        refs, gaps = [], []
        for rid in ids:
            target_mean = mean_logp(logps[view.target][rid])
            refs.append("+".join(outs[rid]))
            gaps.append(min(target_mean - mean_logp(logps[m][rid]) for m in outs[rid]))  # gap to the max reference
        gaps_arr, labels = np.array(gaps), np.array([labels_map[r] for r in ids], dtype=bool)
        identity = np.array([np.mean([g for j, (g, r) in enumerate(zip(gaps, refs)) if r == refs[i] and j != i])
                             if refs.count(refs[i]) > 1 else np.nan for i in range(len(ids))])
        ok = ~np.isnan(identity)
        within, n_pairs = within_reference_auroc(gaps_arr, labels, refs)
        row = {
            "label_source": view.label_source, "null_check": view.null_check,
            "auroc_gap": round(float(roc_auc_score(labels, gaps_arr)), 3),
            "auroc_ref_identity": round(float(roc_auc_score(labels[ok], identity[ok])), 3)
            if 0 < labels[ok].sum() < ok.sum() else None,
            "auroc_within_reference": None if np.isnan(within) else round(within, 3),
            "within_reference_pairs": n_pairs,
            "refs_members": dict(Counter(r for r, m in zip(refs, labels) if m)),
            "refs_nonmembers": dict(Counter(r for r, m in zip(refs, labels) if not m)),
            "mean_gap_by_ref": {r: round(float(np.mean(gaps_arr[[x == r for x in refs]])), 3) for r in sorted(set(refs))},
        }
        out[view.target] = row
        print(view.target, json.dumps(row), flush=True)
    real = [r for r in out.values() if not r["null_check"]]
    wins = sum(r["auroc_within_reference"] * r["within_reference_pairs"] for r in real
               if r["auroc_within_reference"] is not None)
    n = sum(r["within_reference_pairs"] for r in real)
    out["_pooled_real_targets"] = {"auroc_within_reference": round(wins / n, 3) if n else None, "pairs": n}
    print("pooled over real targets, within-reference AUROC:", out["_pooled_real_targets"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--k-refs", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = analyse(args.run_dir, args.k_refs)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
