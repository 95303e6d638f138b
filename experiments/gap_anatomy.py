"""docs/results.md: none of its numbers (where the fresh-trajectory gap comes from, per target; a diagnostic).

Where a fresh-trajectory signal comes from, per target of a finished run (reads stored signals only).

For each real target: mean per-token log p of the target's own fresh samples, and of the max over its matched
OUT references on the same tokens, split by members and non-members; their difference is the (unrectified)
gap Leaky and fresh_gap_max read. Shows whether a signal lives in the target (members' samples more likely to
the target) or in the references (members' samples less likely to students that never saw the record).

    python experiments/gap_anatomy.py runs/sweep/code_teacher96_m8_e30 [--json experiments/results/gap_anatomy.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from leakaudit.assemble import run_inputs
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MembershipPlan
from leakaudit.rundir import RunDir


def _record_means(per_traj) -> np.ndarray:
    return np.array([np.mean([x.mean() for x in trajs if x.size]) if any(x.size for x in trajs) else np.nan
                     for trajs in per_traj])


def anatomy(run_root: Path) -> dict:
    run = RunDir(run_root)
    cfg = load_config(path=run.config)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    out = {}
    for view, inp in run_inputs(run, plan, records, cfg.plan.n_matched_references):
        if view.null_check:
            continue
        member = np.asarray(inp.labels, dtype=bool)
        target = _record_means(inp.fresh_target)
        ref = _record_means([[r.max(axis=0) for r in refs] for refs in inp.fresh_refs])
        out[view.target] = {f"{name}_{side}": round(float(np.nanmean(v[mask])), 4)
                            for name, v in (("target_logp", target), ("ref_logp", ref), ("gap", target - ref))
                            for side, mask in (("members", member), ("nonmembers", ~member))}
        print(view.target, out[view.target], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = anatomy(args.run_dir)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
