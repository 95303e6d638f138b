"""Turn stored signals + the membership plan into the arrays one target's attacks need.

This is the one place that decides which reference models an attack may look at for a record:
- fresh trajectories: exactly k OUT references (students that never trained on the record), never the target;
- fixed texts: k IN and k OUT references (for LiRA online) with their flags;
- population texts: every student of the domain except the target.
k is fixed per study, so the number of references never depends on the record's membership in the target.
Labels are attached only for the blind text baseline, which cross-validates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from attacks import AttackInputs
from leakaudit.data.records import Record
from leakaudit.membership import MembershipPlan
from leakaudit.signals.store import load_fixed, load_logp, load_trajectories

BASE_ID = "base"


@dataclass(frozen=True)
class TargetView:
    """Who is attacked and with which labels. For a null target, labels come from another student."""

    target: str
    domain: str
    label_source: str
    null_check: bool


def target_views(plan: MembershipPlan) -> list[TargetView]:
    """Every student of every domain is a target in turn; each null student is attacked with the labels
    of its domain's first student (it never trained on any candidate, so AUROC must be ≈ 0.5)."""
    views = []
    for model_id, info in plan.models.items():
        if info["role"] == "student":
            views.append(TargetView(model_id, info["domain"], model_id, False))
    for model_id, info in plan.models.items():
        if info["role"] == "null":
            first = plan.models_of(info["domain"], "student")[0]
            views.append(TargetView(model_id, info["domain"], first, True))
    return views


def excluded_references(view: TargetView) -> tuple[str, ...]:
    """A null target must not use the student whose labels it borrows as a reference."""
    return (view.label_source,) if view.null_check else ()


def out_references(plan: MembershipPlan, view: TargetView, k_refs: int) -> dict[str, list[str]]:
    """Candidate record_id -> the k matched OUT references of the view's target for that record (the seeded
    choice of `MembershipPlan.references_for`; a null target never uses the student whose labels it borrows)."""
    exclude = excluded_references(view)
    return {rid: plan.references_for(view.target, rid, member=False, k=k_refs, exclude=exclude)
            for rid in plan.candidates[view.domain]}


def fresh_scorers(plan: MembershipPlan, view: TargetView, k_refs: int,
                  outs: dict[str, list[str]] | None = None) -> dict[str, list[str] | None]:
    """Which models must score the target's fresh trajectories, and on which records (None = all of them):
    the target and the base on every candidate; each other student only on the records for which it is one of
    the k matched OUT references (`outs`, computed by `out_references` when not given)."""
    needs: dict[str, list[str] | None] = {view.target: None, BASE_ID: None}
    for rid, refs in (outs if outs is not None else out_references(plan, view, k_refs)).items():
        for m in refs:
            needs.setdefault(m, []).append(rid)
    return needs


def reference_balance(plan: MembershipPlan, k_refs: int) -> list[dict]:
    """Per target: how often each student is a matched OUT reference (the ones `build_inputs` uses for fresh
    trajectories) for the target's members vs its non-members, and the total variation distance between those two
    distributions (0 = reference identity says nothing about the label; 1 = it gives the label away).

    Computed from the plan alone. Students differ by large per-model offsets, so a reference-based score inherits
    any such imbalance as a spurious signal: with 4 students and LiRA's random halves a target's non-member has
    exactly one other OUT student, and distances of 0.75 were seen (bench/reference_confound.py).
    Rows: {target, label_source, null_check, tvd, refs_members: {model: count}, refs_nonmembers: {...}}.
    """
    rows = []
    for view in target_views(plan):
        labels = plan.labels(view.label_source)
        counts: dict[bool, dict[str, int]] = {True: {}, False: {}}
        for rid, refs in out_references(plan, view, k_refs).items():
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


def build_inputs(run_root, plan: MembershipPlan, view: TargetView, records: dict[str, Record], *,
                 k_refs: int, fresh_dir, fixed_path) -> AttackInputs:
    """Assemble AttackInputs for one target. `fresh_dir(target)` and `fixed_path(model_id)` locate the store."""
    target, domain = view.target, view.domain
    cand = plan.candidates[domain]
    pop = plan.population[domain]
    labels_map = plan.labels(view.label_source)
    students = [m for m in plan.models_of(domain, "student") if m != target and m not in excluded_references(view)]

    trajs = load_trajectories(fresh_dir(target))
    out_refs = out_references(plan, view, k_refs)
    fresh_lp = {m: load_logp(fresh_dir(target), m) for m in fresh_scorers(plan, view, k_refs, out_refs)}
    fixed = {m: load_fixed(fixed_path(m)) for m in [target, BASE_ID, *students]}

    fresh_target, fresh_refs, fresh_base = [], [], []
    fixed_target, fixed_mu, fixed_sigma, fixed_base, fixed_refs, fixed_in = [], [], [], [], [], []
    for rid in cand:
        outs = out_refs[rid]
        ins = plan.references_for(target, rid, member=True, k=k_refs, exclude=excluded_references(view))
        n_traj = len(trajs[rid])
        fresh_target.append([fresh_lp[target][rid][j] for j in range(n_traj)])
        fresh_base.append([fresh_lp[BASE_ID][rid][j] for j in range(n_traj)])
        fresh_refs.append([stack_rows([fresh_lp[m][rid][j] for m in outs]) for j in range(n_traj)])
        ft = fixed[target][rid]
        fixed_target.append(ft.logp)
        fixed_mu.append(ft.mu)
        fixed_sigma.append(ft.sigma)
        fixed_base.append(fixed[BASE_ID][rid].logp)
        fixed_refs.append(stack_rows([fixed[m][rid].logp for m in ins + outs]))
        fixed_in.append(np.array([True] * len(ins) + [False] * len(outs)))
    population_target = np.array([_mean(fixed[target][z].logp) for z in pop], dtype=np.float64) if pop else None
    population_refs = (np.array([[_mean(fixed[m][z].logp) for m in students] for z in pop], dtype=np.float64)
                       if pop else None)
    return AttackInputs(
        record_ids=list(cand), texts=[records[r].privileged for r in cand],
        fresh_target=fresh_target, fresh_refs=fresh_refs, fresh_base=fresh_base,
        fixed_target=fixed_target, fixed_target_mu=fixed_mu, fixed_target_sigma=fixed_sigma,
        fixed_base=fixed_base, fixed_refs=fixed_refs, fixed_ref_in=fixed_in,
        population_target=population_target, population_refs=population_refs,
        labels=np.array([labels_map[r] for r in cand], dtype=bool),
    )


def run_inputs(run, plan: MembershipPlan, records: dict[str, Record], k_refs: int
               ) -> Iterator[tuple[TargetView, AttackInputs]]:
    """Every target of a finished run (a RunDir) with its attack inputs, in target_views order."""
    for view in target_views(plan):
        yield view, build_inputs(run.root, plan, view, records, k_refs=k_refs, fresh_dir=run.fresh,
                                 fixed_path=run.fixed)


def stack_rows(rows: Sequence[np.ndarray]) -> np.ndarray:
    """R arrays of equal length T -> [R, T] float64; no rows -> shape [0, 0]."""
    if not rows:
        return np.zeros((0, 0))
    return np.stack([np.asarray(r, dtype=np.float64) for r in rows])


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if len(x) else float("nan")
