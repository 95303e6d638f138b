"""Turn stored signals + the membership plan into the arrays one target's attacks need.

The one assembler, for studies and audits alike. Which references score a record is the plan's answer
(`MembershipPlan.references`: the matched ones, or for an offline view the domain's offline references); this module only gathers the stored log-probs in that order:
- fresh trajectories: the record's k_out matched OUT references, never the target;
- fixed texts: its k_in IN and k_out OUT references (LiRA online, RMIA) with their flags, and for each the
  column of the population comparison that holds the same model (`fixed_ref_cols`);
- population texts: every model that may serve the target as a reference, scored on the population records
  that none of them (and not the target) trained on — RMIA's z must be OUT for every model it is compared under.
Labels are attached only for the blind text baseline (the attack runner hands each attack only what it needs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from attacks import AttackInputs
from leakaudit.data.records import Record
from leakaudit.membership import MembershipPlan, TargetView
from leakaudit.signals.store import load_fixed, load_logp, load_trajectories

BASE_ID = "base"


def reference_balance(plan: MembershipPlan, k_refs: int) -> list[dict]:
    """Per target: how often each student is a matched OUT reference (the ones `build_inputs` uses for fresh
    trajectories) for the target's members vs its non-members, and the total variation distance between those two
    distributions (0 = reference identity says nothing about the label; 1 = it gives the label away).

    Computed from the plan alone. Students differ by large per-model offsets, so a reference-based score inherits
    any such imbalance as a spurious signal: with 4 students and LiRA's random halves a target's non-member has
    exactly one other OUT student, and distances of 0.75 were seen (experiments/reference_confound.py).
    Rows: {target, label_source, null_check, tvd, refs_members: {model: count}, refs_nonmembers: {...}}.
    """
    rows = []
    for view in plan.views():
        labels = plan.labels(view.label_source)
        counts: dict[bool, dict[str, int]] = {True: {}, False: {}}
        matched = plan.matched_references(view, 0, k_refs)
        for rid, refs in zip(matched.record_ids, matched.outs):
            for m in refs:
                counts[labels[rid]][m] = counts[labels[rid]].get(m, 0) + 1
        n_in, n_out = sum(counts[True].values()), sum(counts[False].values())
        models = sorted(set(counts[True]) | set(counts[False]))
        tvd = (0.5 * sum(abs(counts[True].get(m, 0) / n_in - counts[False].get(m, 0) / n_out) for m in models)
               if n_in and n_out else float("nan"))
        rows.append({"target": view.target, "label_source": view.label_source, "null_check": view.null_check,
                     "tvd": round(tvd, 4), "refs_members": dict(sorted(counts[True].items())),
                     "refs_nonmembers": dict(sorted(counts[False].items()))})
    return rows


def clean_population(plan: MembershipPlan, view: TargetView, models: Sequence[str]) -> list[str]:
    """The domain's population records that neither the target nor any of `models` trained on, in plan order
    (a null student trains on population records; audit references may too)."""
    t = plan.table
    trained = set(t.loc[t.model_id.isin([view.target, *models]) & t.is_member, "record_id"])
    return [z for z in plan.population[view.domain] if z not in trained]


def build_inputs(plan: MembershipPlan, view: TargetView, records: dict[str, Record], *, k_in: int, k_out: int,
                 fresh_dir, fixed_path) -> AttackInputs:
    """AttackInputs for one target. `fresh_dir(target)` and `fixed_path(model_id)` locate the store.
    Labels are None when the plan has none for the view (an audit without ground truth)."""
    target = view.target
    matched = plan.references(view, k_in, k_out)
    cand = matched.record_ids
    pool = matched.pool
    col = {m: i for i, m in enumerate(pool)}
    pop = clean_population(plan, view, pool)
    labels_map = plan.labels(view.label_source)

    trajs = load_trajectories(fresh_dir(target))
    fresh_lp = {m: load_logp(fresh_dir(target), m) for m in matched.fresh_scorers(target, BASE_ID)}
    # An API target without prompt log-probs has no fixed-text file: its fixed-text fields stay None (those
    # attacks are skipped, leakaudit.signals.api_stage); any other missing file is still an error.
    target_fixed = Path(fixed_path(target)).is_file() or not (Path(fresh_dir(target)) / "api.json").is_file()
    fixed = {m: load_fixed(fixed_path(m)) for m in [target, BASE_ID, *pool] if m != target or target_fixed}

    fresh_target, fresh_refs, fresh_base = [], [], []
    fixed_target, fixed_mu, fixed_sigma, fixed_base, fixed_refs, fixed_in, fixed_cols = [], [], [], [], [], [], []
    for rid, ins, outs in zip(cand, matched.ins, matched.outs):
        ins, outs = list(ins), list(outs)
        n_traj = len(trajs.get(rid, ()))  # 0: an API target's record excluded (tokens not recoverable)
        fresh_target.append([fresh_lp[target][rid][j] for j in range(n_traj)])
        fresh_base.append([fresh_lp[BASE_ID][rid][j] for j in range(n_traj)])
        fresh_refs.append([stack_rows([fresh_lp[m][rid][j] for m in outs]) for j in range(n_traj)])
        if target_fixed:
            ft = fixed[target][rid]
            fixed_target.append(ft.logp)
            fixed_mu.append(ft.mu)
            fixed_sigma.append(ft.sigma)
        fixed_base.append(fixed[BASE_ID][rid].logp)
        fixed_refs.append(stack_rows([fixed[m][rid].logp for m in ins + outs]))
        fixed_in.append(np.array([True] * len(ins) + [False] * len(outs), dtype=bool))
        fixed_cols.append(np.array([col[m] for m in ins + outs], dtype=np.int64))
    has_pop = bool(pop) and bool(pool)
    population_target = (np.array([_mean(fixed[target][z].logp) for z in pop], dtype=np.float64)
                         if has_pop and target_fixed else None)
    # no vocabulary statistics (an API target): Min-K%++ sees None and is skipped rather than fed Nones
    if any(m is None for m in fixed_mu) or not target_fixed:
        fixed_mu = fixed_sigma = None
    if not target_fixed:
        fixed_target = None
    population_refs = (np.array([[_mean(fixed[m][z].logp) for m in pool] for z in pop], dtype=np.float64)
                       if has_pop else None)
    labels = np.array([labels_map[r] for r in cand], dtype=bool) if labels_map else None
    return AttackInputs(
        record_ids=list(cand), texts=[records[r].privileged for r in cand],
        fresh_target=fresh_target, fresh_refs=fresh_refs, fresh_base=fresh_base,
        fixed_target=fixed_target, fixed_target_mu=fixed_mu, fixed_target_sigma=fixed_sigma,
        fixed_base=fixed_base, fixed_refs=fixed_refs, fixed_ref_in=fixed_in, fixed_ref_cols=fixed_cols,
        population_target=population_target, population_refs=population_refs, labels=labels,
    )


def run_inputs(run, plan: MembershipPlan, records: dict[str, Record], n_matched: int = 0
               ) -> Iterator[tuple[TargetView, AttackInputs]]:
    """Every target of a finished run (a RunDir) with its attack inputs, in `plan.views()` order, then the same
    targets with the offline references (`plan.offline_views()`, when the plan has offline references)."""
    k_in, k_out = plan.reference_counts(n_matched)
    for view in plan.views() + plan.offline_views():
        yield view, build_inputs(plan, view, records, k_in=k_in, k_out=k_out, fresh_dir=run.fresh,
                                 fixed_path=run.fixed)


def stack_rows(rows: Sequence[np.ndarray]) -> np.ndarray:
    """R arrays of equal length T -> [R, T] float64; no rows -> shape [0, 0]."""
    if not rows:
        return np.zeros((0, 0))
    return np.stack([np.asarray(r, dtype=np.float64) for r in rows])


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if len(x) else float("nan")
