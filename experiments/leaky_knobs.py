"""docs/results.md: none of its numbers (Leaky's slope and reductions swept on stored signals).

Leaky's own knobs on a finished run's stored signals. Trains, samples and scores nothing.

Re-runs `leaky` with each variant below (slope, token aggregation, reference reduction, first-K tokens) on every
target of the run and reports pooled AUROC [95% CI] per domain, real targets and null targets separately.
The run's own default (slope 0.1, mean, max) was fixed before any of this was measured; these rows show how much
each knob matters on one run, not a tuned choice (picking the best row here and reporting it would overfit).

    python experiments/leaky_knobs.py runs/sweep/code_teacher96_m8_e30 [--json experiments/results/leaky_knobs.json]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from leakaudit.assemble import run_inputs
from leakaudit.config import AttackSpecConfig, load_config
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MembershipPlan
from leakaudit.metrics import summarise
from leakaudit.rundir import RunDir
from leakaudit.scoring import attack_rows

VARIANTS: dict[str, dict] = {
    "default (slope 0.1, mean, max)": {},
    "slope 0": {"slope": 0.0},
    "slope 0.5": {"slope": 0.5},
    "slope 1 (= fresh_gap_max)": {"slope": 1.0},
    "top 20% tokens": {"token_aggregation": "topk", "topk_fraction": 0.2},
    "top 5% tokens": {"token_aggregation": "topk", "topk_fraction": 0.05},
    "mean over references": {"reference_reduction": "mean"},
    "first 16 tokens": {"max_tokens": 16},
    "first 32 tokens": {"max_tokens": 32},
}


def knob_table(run_root: Path, n_boot: int = 1000) -> pd.DataFrame:
    run = RunDir(run_root)
    cfg = load_config(path=run.config)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    specs = [AttackSpecConfig(name="leaky", params=p, label=label) for label, p in VARIANTS.items()]
    frames = []
    for view, inputs in run_inputs(run, plan, records, cfg.plan.n_matched_references):
        frames.append(attack_rows(inputs, specs, target=view.target, domain=view.domain,
                                  null_check=view.null_check, label_source=view.label_source))
    metrics = summarise(pd.concat(frames, ignore_index=True), n_boot=n_boot, seed=0)
    rows = metrics[metrics.level == "domain"]
    return rows[["domain", "null_check", "label", "auroc", "auroc_lo", "auroc_hi", "tpr@0.1"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    table = knob_table(args.run_dir)
    print("| domain | targets | variant | AUROC [95% CI] | TPR@10%FPR |\n|---|---|---|---|---|")
    for _, r in table.iterrows():
        print(f"| {r.domain} | {'null' if r.null_check else 'real'} | {r.label} | "
              f"{r.auroc:.3f} [{r.auroc_lo:.3f}, {r.auroc_hi:.3f}] | {r['tpr@0.1']:.2f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(table.to_json(orient="records", indent=2))


if __name__ == "__main__":
    main()
