"""docs/results.md, More references per record: Leaky 0.663, 0.708, 0.725 with 1, 2, 3 references (math, 8 passes).

How every reference-based attack grows with the number of matched references per record, on a finished run's
stored signals (one matched reference per record cannot give Leaky its max over references; does
a fourth, a seventh, look worth training?). Trains, samples and scores nothing.

For m = 1 .. the run's own count (plan.n_matched_references, default n_students/2 - 1) every attack of the run is
re-run on every real target with the first m of each record's matched OUT references (and, for the online attacks,
the first m IN ones): a subset of the references the run scored with, since the signals stage scored each sample
with those only (the plan's own draw for a smaller count may pick a student that never scored it); each row is the
pooled AUROC [95% CI] per domain. m = the run's count reproduces its report. A curve still rising at the last
m says more students would help that attack; a flat one says the references are not what holds it back. Attacks
that read no reference (LOSS, zlib, Min-K%, fresh_loss, blind) are left out: they do not change with m. A run with
offline references (plan.n_offline_references R) gets a second curve, m = 1 .. R, of the attacks in their offline
forms ('@offline', as in its report), each target against the first m of its domain's offline references.

    python experiments/reference_curve.py runs/sweep/regime_math_prepared_e8_seed1 [--json experiments/results/reference_curve_....json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from leakaudit.assemble import run_inputs
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.membership import OFFLINE, MembershipPlan
from leakaudit.metrics import summarise
from leakaudit.rundir import RunDir
from leakaudit.scoring import attack_rows, attack_specs, offline_design_specs, reads_references

DESIGNS = ("matched", "offline")


def _select_references(inputs, fresh_rows, fixed_rows):
    """AttackInputs keeping, per record, the fresh_refs rows `fresh_rows(R)` picks ([n_i][R, T] -> [n_i][R', T]) and
    the fixed_refs / fixed_ref_in / fixed_ref_cols rows `fixed_rows(is_in)` picks (sorted, so kept rows stay in
    order). The population's columns stay: fixed_ref_cols still points each kept row at its model's column."""
    changes = {}
    if inputs.fresh_refs is not None:
        changes["fresh_refs"] = [[traj[fresh_rows(len(traj))] for traj in per_record] for per_record in inputs.fresh_refs]
    if inputs.fixed_refs is not None:
        keep = [np.sort(fixed_rows(np.asarray(is_in, dtype=bool))) for is_in in inputs.fixed_ref_in]
        for field in ("fixed_refs", "fixed_ref_in", "fixed_ref_cols"):
            if getattr(inputs, field) is not None:
                changes[field] = [np.asarray(a)[k] for a, k in zip(getattr(inputs, field), keep)]
    return dataclasses.replace(inputs, **changes)


def first_m_references(inputs, m: int):
    """Each record's first m OUT references in fresh_refs, and its first m IN and first m OUT rows of fixed_refs."""
    return _select_references(
        inputs, lambda r: np.arange(min(m, r)),
        lambda is_in: np.concatenate([np.flatnonzero(is_in)[:m], np.flatnonzero(~is_in)[:m]]))


def without_out_reference(inputs, j: int):
    """Each record's j-th OUT reference left out: row j of every fresh_refs trajectory and the j-th OUT row of
    fixed_refs (IN rows and the order of the rest kept)."""
    return _select_references(
        inputs, lambda r: np.delete(np.arange(r), j),
        lambda is_in: np.setdiff1d(np.arange(len(is_in)), np.flatnonzero(~is_in)[j:j + 1]))


def load_views(run_root: Path):
    """{design: (attack specs, n references, [(view, AttackInputs)] of its real targets)}, the signals read
    once. Matched: the attacks that read references, the plan's count of matched OUT references
    (MembershipPlan.reference_counts); offline: their offline forms labelled '@offline' as in the report,
    plan.n_offline_references."""
    run = RunDir(run_root)
    cfg = load_config(path=run.config)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    views = [(v, i) for v, i in run_inputs(run, plan, records, cfg.plan.n_matched_references) if not v.null_check]
    specs = {"matched": [a for a in attack_specs(cfg.attacks) if reads_references(a.name)],
             "offline": offline_design_specs(cfg.attacks)}
    n_ref = {"matched": plan.reference_counts(cfg.plan.n_matched_references)[1],
             "offline": cfg.plan.n_offline_references}
    return {d: (specs[d], n_ref[d], [(v, i) for v, i in views if (v.references == OFFLINE) == (d == "offline")])
            for d in DESIGNS}


def _domain_rows(views, specs, cut, *, n_boot: int) -> pd.DataFrame:
    """The pooled per-domain metrics of `specs` on `views` with every record's inputs passed through `cut`."""
    rows = pd.concat([attack_rows(cut(inputs), specs, target=v.target, domain=v.domain,
                                  label_source=v.label_source, log=lambda *_: None) for v, inputs in views],
                     ignore_index=True)
    summary = summarise(rows, n_boot=n_boot, seed=0)
    return summary[summary.level == "domain"]


def curve(designs: dict, n_boot: int = 1000) -> pd.DataFrame:
    """Per design, m and domain: attack, auroc, auroc_lo, auroc_hi over the run's real targets (designs: load_views);
    m = 1 .. the design's count, a design without targets skipped."""
    out = [_domain_rows(views, specs, lambda x, m=m: first_m_references(x, m), n_boot=n_boot).assign(design=d, m=m)
           for d, (specs, n_ref, views) in designs.items() if views for m in range(1, n_ref + 1)]
    return pd.concat(out, ignore_index=True)[["design", "m", "domain", "attack", "auroc", "auroc_lo", "auroc_hi"]]


def leave_one_out(designs: dict, design: str = "offline") -> pd.DataFrame:
    """Per left-out OUT reference j (0-based, in the order the run holds them) and domain: attack, auroc, with all
    the design's other references. Says whether the last step of the curve is the draw of one reference: if leaving
    out the last one costs much more than leaving out any other, the curve's last step is that reference's."""
    specs, n_ref, views = designs[design]
    out = [_domain_rows(views, specs, lambda x, j=j: without_out_reference(x, j), n_boot=0).assign(left_out=j)
           for j in range(n_ref)]
    return pd.concat(out, ignore_index=True)[["left_out", "domain", "attack", "auroc"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--leave-one-out", choices=DESIGNS, default=None,
                    help="also each attack with all the design's references but one, for each one left out")
    args = ap.parse_args()
    designs = load_views(args.run_dir)
    table = curve(designs)
    wide = table.assign(cell=[f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in
                              zip(table.auroc, table.auroc_lo, table.auroc_hi)])
    print(wide.pivot_table(index=["design", "domain", "attack"], columns="m", values="cell",
                           aggfunc="first").to_string())
    result = {"run": str(args.run_dir), "curve": table.round(4).to_dict(orient="records")}
    if args.leave_one_out:
        loo = leave_one_out(designs, args.leave_one_out)
        print(loo.pivot_table(index=["domain", "attack"], columns="left_out", values="auroc").round(3).to_string())
        result["leave_one_out"] = {"design": args.leave_one_out, "rows": loo.round(4).to_dict(orient="records")}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
