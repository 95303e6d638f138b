"""docs/results.md: none; docs/guide/report.md's no-signal value of the blind text baseline (≈0.38 at 16 records).

What AUROC does the cross-validated `blind_text` baseline give when labels carry NO information? Reads a run.

With few records, out-of-fold classifiers are biased BELOW 0.5 under random labels: each fold's training set is
short of the held-out record's class, so the fitted prior leans against it. This draws random balanced labels for
the run's candidates (seeded) and reports the mean and spread of blind_text's AUROC — the value to compare the
report's blind baseline with at that size, not 0.5. No model is run.

    python experiments/blind_text_null.py runs/default [--draws 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from attacks import AttackInputs, run_attack
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MembershipPlan
from leakaudit.rundir import RunDir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    run = RunDir(args.run_dir)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    rng = np.random.default_rng(args.seed)
    out = {}
    for domain, ids in sorted(plan.candidates.items()):
        texts, n = [records[r].privileged for r in ids], len(ids)
        aucs = []
        for _ in range(args.draws):
            y = np.zeros(n, dtype=bool)
            y[rng.choice(n, n // 2, replace=False)] = True
            aucs.append(roc_auc_score(y, run_attack("blind_text", AttackInputs(record_ids=ids, texts=texts, labels=y))))
        a = np.array(aucs)
        out[domain] = {"n_candidates": n, "draws": args.draws, "mean": round(float(a.mean()), 3),
                       "sd": round(float(a.std()), 3), "q05": round(float(np.quantile(a, 0.05)), 3),
                       "q95": round(float(np.quantile(a, 0.95)), 3)}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
