"""How every reference-based attack grows with the number of matched references per record, on a finished run's
stored signals (issue 14, part 3: one matched reference per record cannot give Leaky its max over references; does
a fourth, a seventh, look worth training?). Trains, samples and scores nothing.

For m = 1 .. the run's own count (plan.n_matched_references, default n_students/2 - 1) every attack of the run is
re-run on every real target with the first m of each record's matched OUT references (and, for the online attacks,
the first m IN ones): a subset of the references the run scored with, since the signals stage scored each sample
with those only (the plan's own draw for a smaller count may pick a student that never scored it); each row is the
pooled AUROC [95% CI] per domain. m = the run's count reproduces its report. A curve still rising at the last
m says more students would help that attack; a flat one says the references are not what holds it back. Attacks
that read no reference (LOSS, zlib, Min-K%, fresh_loss, blind) are left out: they do not change with m.

    python bench/reference_curve.py runs/sweep/regime_math_prepared_e8_seed1 [--json bench/results/reference_curve_....json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from attacks import get_attack
from leakaudit.assemble import run_inputs
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MATCHED, MembershipPlan
from leakaudit.metrics import summarise
from leakaudit.rundir import RunDir
from leakaudit.scoring import attack_rows, attack_specs

REFERENCE_SIGNALS = {"fixed_refs", "fixed_ref_in", "fresh_refs", "population_refs"}


def first_m_references(inputs, m: int):
    """AttackInputs with each record's first m OUT references in fresh_refs ([n_i][R, T] -> [n_i][m, T]) and its first
    m IN and first m OUT rows in fixed_refs / fixed_ref_in / fixed_ref_cols (rows kept in their order). The
    population's columns stay: fixed_ref_cols still points each kept row at its model's column."""
    changes = {}
    if inputs.fresh_refs is not None:
        changes["fresh_refs"] = [[traj[:m] for traj in per_record] for per_record in inputs.fresh_refs]
    if inputs.fixed_refs is not None:
        keep = []
        for is_in in inputs.fixed_ref_in:
            is_in = np.asarray(is_in, dtype=bool)
            rows = np.flatnonzero(is_in)[:m].tolist() + np.flatnonzero(~is_in)[:m].tolist()
            keep.append(np.sort(rows))
        changes["fixed_refs"] = [np.asarray(a)[k] for a, k in zip(inputs.fixed_refs, keep)]
        changes["fixed_ref_in"] = [np.asarray(a)[k] for a, k in zip(inputs.fixed_ref_in, keep)]
        if inputs.fixed_ref_cols is not None:
            changes["fixed_ref_cols"] = [np.asarray(a)[k] for a, k in zip(inputs.fixed_ref_cols, keep)]
    return dataclasses.replace(inputs, **changes)


def curve(run_root: Path, n_boot: int = 1000) -> pd.DataFrame:
    """Per m and domain: attack, auroc, auroc_lo, auroc_hi, over the run's real targets with matched references."""
    run = RunDir(run_root)
    cfg = load_config(path=run.config)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    specs = [a for a in attack_specs(cfg.attacks) if REFERENCE_SIGNALS & set(get_attack(a.name).needs)]
    n_ref = cfg.plan.n_matched_references or cfg.plan.n_students // 2 - 1
    out = []
    for m in range(1, n_ref + 1):
        frames = [attack_rows(first_m_references(inputs, m), specs, target=view.target, domain=view.domain,
                              label_source=view.label_source, log=lambda *_: None)
                  for view, inputs in run_inputs(run, plan, records, cfg.plan.n_matched_references)
                  if not view.null_check and view.references == MATCHED]
        summary = summarise(pd.concat(frames, ignore_index=True), n_boot=n_boot, seed=0)
        out.append(summary[summary.level == "domain"].assign(m=m)[["m", "domain", "attack", "auroc", "auroc_lo",
                                                                     "auroc_hi"]])
    return pd.concat(out, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    table = curve(args.run_dir)
    wide = table.assign(cell=[f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in
                              zip(table.auroc, table.auroc_lo, table.auroc_hi)])
    print(wide.pivot_table(index=["domain", "attack"], columns="m", values="cell", aggfunc="first").to_string())
    if args.json:
        args.json.write_text(json.dumps({"run": str(args.run_dir), "curve": table.round(4).to_dict(orient="records")},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
