"""How every reference-based attack grows with the number of matched references per record, on a finished run's
stored signals (issue 14, part 3: one matched reference per record cannot give Leaky its max over references; does
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
from leakaudit.config import AttackSpecConfig, load_config
from leakaudit.data.records import read_jsonl
from leakaudit.audit import offline_attacks
from leakaudit.membership import OFFLINE, MembershipPlan
from leakaudit.metrics import summarise
from leakaudit.rundir import RunDir
from leakaudit.scoring import OFFLINE_SUFFIX, REFERENCE_FIELDS, attack_rows, attack_specs



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


def without_out_reference(inputs, j: int):
    """AttackInputs with each record's j-th OUT reference left out: row j of every fresh_refs trajectory, and the j-th
    OUT row of fixed_refs / fixed_ref_in / fixed_ref_cols (IN rows and the order of the rest kept)."""
    changes = {}
    if inputs.fresh_refs is not None:
        changes["fresh_refs"] = [[np.delete(traj, j, axis=0) for traj in per_record] for per_record in inputs.fresh_refs]
    if inputs.fixed_refs is not None:
        keep = []
        for is_in in inputs.fixed_ref_in:
            out_rows = np.flatnonzero(~np.asarray(is_in, dtype=bool))
            keep.append(np.setdiff1d(np.arange(len(is_in)), out_rows[j:j + 1]))
        changes["fixed_refs"] = [np.asarray(a)[k] for a, k in zip(inputs.fixed_refs, keep)]
        changes["fixed_ref_in"] = [np.asarray(a)[k] for a, k in zip(inputs.fixed_ref_in, keep)]
        if inputs.fixed_ref_cols is not None:
            changes["fixed_ref_cols"] = [np.asarray(a)[k] for a, k in zip(inputs.fixed_ref_cols, keep)]
    return dataclasses.replace(inputs, **changes)


def leave_one_out(run_root: Path, design: str = "offline") -> pd.DataFrame:
    """Per left-out OUT reference j (0-based, in the order the run holds them) and domain: attack, auroc, with all
    the design's other references. Says whether the last step of the curve is the draw of one reference: if leaving
    out the last one costs much more than leaving out any other, the curve's last step is that reference's."""
    run = RunDir(run_root)
    cfg = load_config(path=run.config)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    specs = _specs(cfg, design)
    n_ref = cfg.plan.n_offline_references if design == "offline" else (
        cfg.plan.n_matched_references or cfg.plan.n_students // 2 - 1)
    views = [(v, i) for v, i in run_inputs(run, plan, records, cfg.plan.n_matched_references)
             if not v.null_check and (v.references == OFFLINE) == (design == "offline")]
    out = []
    for j in range(n_ref):
        rows = pd.concat([attack_rows(without_out_reference(inputs, j), specs, target=v.target, domain=v.domain,
                                      label_source=v.label_source, log=lambda *_: None) for v, inputs in views])
        summary = summarise(rows, n_boot=0, seed=0)
        out.append(summary[summary.level == "domain"].assign(left_out=j)[["left_out", "domain", "attack", "auroc"]])
    return pd.concat(out, ignore_index=True)


def _specs(cfg, design: str):
    """The reference-based attacks of the run, in the design's forms (offline: leakaudit.audit.offline_attacks,
    labelled '@offline' as in the report)."""
    if design == "offline":
        return [AttackSpecConfig(name=a.name, params=a.params, label=f"{a.display}{OFFLINE_SUFFIX}")
                for a in offline_attacks(cfg.attacks) if REFERENCE_FIELDS & set(get_attack(a.name).needs)]
    return [a for a in attack_specs(cfg.attacks) if REFERENCE_FIELDS & set(get_attack(a.name).needs)]


def curve(run_root: Path, n_boot: int = 1000) -> pd.DataFrame:
    """Per design, m and domain: attack, auroc, auroc_lo, auroc_hi, over the run's real targets. The matched design
    runs m = 1 .. its count; the offline design (plan.n_offline_references R, when the run has it: the attacks in
    their offline forms, labelled '@offline' as in the report) runs m = 1 .. R."""
    run = RunDir(run_root)
    cfg = load_config(path=run.config)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    matched_specs, offline_specs = _specs(cfg, "matched"), _specs(cfg, "offline")
    views = [(v, i) for v, i in run_inputs(run, plan, records, cfg.plan.n_matched_references) if not v.null_check]
    n_matched = cfg.plan.n_matched_references or cfg.plan.n_students // 2 - 1
    out = []
    for design, specs, n_ref in (("matched", matched_specs, n_matched),
                                 ("offline", offline_specs, cfg.plan.n_offline_references)):
        design_views = [(v, i) for v, i in views if (v.references == OFFLINE) == (design == "offline")]
        for m in range(1, n_ref + 1 if design_views else 1):
            frames = [attack_rows(first_m_references(inputs, m), specs, target=view.target, domain=view.domain,
                                  label_source=view.label_source, log=lambda *_: None)
                      for view, inputs in design_views]
            summary = summarise(pd.concat(frames, ignore_index=True), n_boot=n_boot, seed=0)
            out.append(summary[summary.level == "domain"].assign(design=design, m=m)[
                ["design", "m", "domain", "attack", "auroc", "auroc_lo", "auroc_hi"]])
    return pd.concat(out, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--leave-one-out", choices=("offline", "matched"), default=None,
                    help="also each attack with all the design's references but one, for each one left out")
    args = ap.parse_args()
    table = curve(args.run_dir)
    wide = table.assign(cell=[f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in
                              zip(table.auroc, table.auroc_lo, table.auroc_hi)])
    print(wide.pivot_table(index=["design", "domain", "attack"], columns="m", values="cell",
                           aggfunc="first").to_string())
    result = {"run": str(args.run_dir), "curve": table.round(4).to_dict(orient="records")}
    if args.leave_one_out:
        loo = leave_one_out(args.run_dir, args.leave_one_out)
        print(loo.pivot_table(index=["domain", "attack"], columns="left_out", values="auroc").round(3).to_string())
        result["leave_one_out"] = {"design": args.leave_one_out, "rows": loo.round(4).to_dict(orient="records")}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
