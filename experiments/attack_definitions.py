"""docs/results.md: none of its numbers (checks that fixing the zlib and RMIA definitions changed only those).

zlib and RMIA before and after their definitions were fixed, on one finished run's stored signals (nothing is retrained).

- zlib: sum log p / zlib bytes (before) vs mean log p / zlib bytes (after; Carlini et al. 2021, MIMIR).
- RMIA: the population prior under every reference student and over every population record (before) vs under
  the record's own IN/OUT reference models (fixed_ref_cols) and over population records that neither the target
  nor those references trained on (after). "before" is recomputed here from the same signals: the population
  comparison with every population record, and p(z) as the mean over every column of population_refs.

Pooled AUROC [95% CI] over the real targets and over the null targets, per definition.

    python experiments/attack_definitions.py runs/default [--json experiments/results/attack_definitions_runG.json]
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from attacks import run_attack
from attacks.errors import AttackInputError
from attacks.rmia import _log_mean_prob
from attacks.zlib_entropy import zlib_length
from leakaudit.assemble import _mean, run_inputs
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MembershipPlan
from leakaudit.metrics import cluster_auroc_ci
from leakaudit.rundir import RunDir
from leakaudit.signals.store import load_fixed


def zlib_sum(inputs) -> np.ndarray:
    return np.array([float(x.astype(np.float64).sum()) / zlib_length(t) if x.size else np.nan
                     for x, t in zip(inputs.fixed_target, inputs.texts)])


def rmia_before(inputs, run: RunDir, plan: MembershipPlan, view) -> np.ndarray:
    """RMIA (online, gamma 1) with the pre-fix population: every population record, p(z) over every column."""
    matched = plan.matched_references(view, *plan.reference_counts())
    pop = plan.population[view.domain]
    fixed = {m: load_fixed(run.fixed(m)) for m in [view.target, *matched.pool]}
    pop_target = np.array([_mean(fixed[view.target][z].logp) for z in pop])
    pop_refs = np.array([[_mean(fixed[m][z].logp) for m in matched.pool] for z in pop])
    log_prior_z = _log_mean_prob(pop_refs, axis=1)
    scores = []
    for i in range(inputs.n):
        refs, is_in = inputs.fixed_refs[i], np.asarray(inputs.fixed_ref_in[i])
        means = refs.mean(axis=1)
        prior_x = np.logaddexp(_log_mean_prob(means[is_in]), _log_mean_prob(means[~is_in])) - np.log(2.0)
        ratio_x = float(np.mean(inputs.fixed_target[i])) - prior_x
        scores.append(float(((ratio_x - (pop_target - log_prior_z)) > 0).mean()))
    return np.array(scores)


def analyse(run_root: Path, n_boot: int) -> dict:
    run = RunDir(run_root)
    cfg = load_config(run_root / "study.yaml")
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    rows = []
    for view, inputs in run_inputs(run, plan, records, cfg.plan.n_matched_references):
        labels = inputs.labels
        variants = {"zlib (sum, before)": zlib_sum(inputs), "zlib (mean, after)": run_attack("zlib", inputs),
                    "rmia (before)": rmia_before(inputs, run, plan, view)}
        try:
            variants["rmia (after)"] = run_attack("rmia", inputs)
        except AttackInputError as e:  # the null target has no clean population in the default preset
            variants["rmia (after)"] = None
            print(f"{view.target}: rmia (after) not available: {e}")
        for name, s in variants.items():
            if s is None:
                continue
            rows += [{"variant": name, "target": view.target, "null": view.null_check, "record_id": r,
                      "score": float(v), "is_member": bool(m)} for r, v, m in zip(inputs.record_ids, s, labels)]
    df = pd.DataFrame(rows)
    out = {"run": str(run_root), "rows": []}
    for (name, null), g in df.groupby(["variant", "null"]):
        auc = roc_auc_score(g.is_member.to_numpy(), g.score.to_numpy())
        lo, hi = cluster_auroc_ci(g.is_member.to_numpy(), g.score.to_numpy(), g.record_id.to_numpy(),
                                  n_boot=n_boot, seed=0)
        out["rows"].append({"variant": name, "null_targets": bool(null), "auroc": round(auc, 3),
                            "ci": [round(lo, 3), round(hi, 3)], "n": len(g)})
        print(f"{name:22s} {'null' if null else 'real'}  {auc:.3f} [{lo:.3f}, {hi:.3f}]  n={len(g)}")
    return out


if __name__ == "__main__":
    from _run_cli import main_over_runs

    main_over_runs(analyse, __doc__)
