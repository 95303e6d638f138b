"""The two plan builders: `keep_matrix_plan` (studies) and `disjoint_plan` (audits), each returning a MembershipPlan.

The designs themselves are described in leakaudit.membership (the package's docstring); a domain's pool is cut by
leakaudit.membership.slices, the keep matrices are drawn by leakaudit.membership.keep.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from leakaudit.errors import ConfigError, InputError
from leakaudit.membership.keep import KEEP_DESIGNS, balanced_subsets_keep_matrix, check_n_students, keep_matrix
from leakaudit.membership.plan import OFFLINE, TARGET_ID, MembershipPlan
from leakaudit.membership.slices import shuffled, split_pool, stable_seed


def null_model_id(domain: str, k: int) -> str:
    """The k-th null student's id: ``<domain>-null`` for the first (the id of plans made before there could be
    several), ``<domain>-null<k>`` after it."""
    return f"{domain}-null" if k == 0 else f"{domain}-null{k}"


def keep_matrix_plan(pools: dict[str, Sequence[str]], *, n_students: int, n_candidates: int, n_population: int,
                     seed: int, null_student: bool = True, keep_design: str = "lira",
                     background: dict[str, Sequence[str]] | None = None, n_offline: int = 0,
                     reference_records: dict[str, Sequence[str]] | None = None,
                     n_null_students: int = 1) -> MembershipPlan:
    """Study plan: for each domain, cut its pool into candidates and population, then a balanced keep matrix.

    Model ids: ``<domain>-s<j>`` for students, ``<domain>-null`` for the null student (trained on
    n_candidates/2 population records, i.e. as many records as each student, but none of them candidates).
    n_null_students (with null_student): that many null students, ``<domain>-null``, ``<domain>-null1``, ...; the
    k-th trains on the k-th slice of n_candidates/2 population records (disjoint slices) and is attacked with the
    labels of student k (`MembershipPlan.views`), so the null check pools k independent draws of labels instead of
    one (one null target of 12 + 12 candidates has an AUROC sd of 0.12 under no signal;
    experiments/null_check_calibration.py).
    keep_design: 'lira' (``keep_matrix``) or 'balanced_subsets' (``balanced_subsets_keep_matrix``).
    background: per domain, record ids (not in its pool) that every student and the null student of the domain
    also train on: the same set for all of them, so what it does to a model is shared by a target and its
    references (the regime of real OPD runs, where candidates are a minority of the training set).
    n_offline, reference_records: the offline design beside the keep matrix: per domain, `n_offline` reference
    models ``<domain>-off<k>`` (role 'offline'), each trained on the background plus a seeded draw of
    n_candidates/2 of the domain's `reference_records` (ids in neither the pool nor the background), so an offline
    reference never sees a candidate or a population record and serves every candidate of every target.
    """
    if keep_design not in KEEP_DESIGNS:
        raise ConfigError(f"plan.keep_design must be one of {KEEP_DESIGNS}, got {keep_design!r}")
    check_n_students(n_students)
    if null_student and not 1 <= n_null_students <= n_students:
        raise ConfigError(f"plan.n_null_students: must be in [1, n_students = {n_students}] (each takes its "
                          f"labels from another student), got {n_null_students}")
    build = keep_matrix if keep_design == "lira" else balanced_subsets_keep_matrix
    background = {d: list(ids) for d, ids in (background or {}).items() if ids}
    reference_records = {d: list(ids) for d, ids in (reference_records or {}).items() if ids}
    unknown = (set(background) | set(reference_records)) - set(pools)
    if unknown:
        raise ConfigError(f"background or reference records for unknown domains {sorted(unknown)}")
    rows, models, candidates, population = [], {}, {}, {}
    for domain in sorted(pools):
        cand, pop = split_pool(list(pools[domain]), n_candidates, n_population, seed, salt=domain)
        candidates[domain], population[domain] = cand, pop
        shared = background.get(domain, [])
        if len(set(shared)) != len(shared):
            raise InputError(f"domain {domain}: duplicate record ids in the background set")
        clash = set(shared) & set(pools[domain])
        if clash:
            raise InputError(f"domain {domain}: {len(clash)} background records are also in the candidate/"
                             f"population pool (e.g. {sorted(clash)[0]}); the background must exclude every "
                             "candidate and population record")
        keep = build(n_students, len(cand), stable_seed(seed, "keep", domain) % 2**32)
        for j in range(n_students):
            model_id = f"{domain}-s{j}"
            models[model_id] = {"domain": domain, "role": "student"}
            rows += [(rid, model_id, bool(keep[j, i])) for i, rid in enumerate(cand)]
            rows += [(rid, model_id, True) for rid in shared]
        if null_student:
            n_null = n_candidates // 2
            if n_null * n_null_students > len(pop):
                raise ConfigError(f"domain {domain}: {n_null_students} null student(s) need {n_null} population "
                                  f"records each, {n_null * n_null_students} in all; only {len(pop)} set aside "
                                  "(raise n_population)")
            for k in range(n_null_students):
                model_id = null_model_id(domain, k)
                models[model_id] = {"domain": domain, "role": "null"}
                rows += [(rid, model_id, False) for rid in cand]
                rows += [(rid, model_id, True) for rid in pop[k * n_null:(k + 1) * n_null]]
                rows += [(rid, model_id, True) for rid in shared]
        if n_offline:
            ref_pool = reference_records.get(domain, [])
            n_own = n_candidates // 2
            if len(ref_pool) < n_own:
                raise ConfigError(f"domain {domain}: {n_offline} offline references need at least {n_own} "
                                  f"reference-only records each, {len(ref_pool)} set aside "
                                  "(raise data.n_reference_records)")
            clash = set(ref_pool) & (set(pools[domain]) | set(shared))
            if clash:
                raise InputError(f"domain {domain}: reference-only record {sorted(clash)[0]} is also a candidate, "
                                 "population or background record")
            for k in range(n_offline):
                model_id = f"{domain}-off{k}"
                models[model_id] = {"domain": domain, "role": OFFLINE}
                rng = np.random.default_rng(stable_seed(seed, "offline", domain, k))
                own = [ref_pool[i] for i in sorted(rng.choice(len(ref_pool), size=n_own, replace=False))]
                rows += [(rid, model_id, False) for rid in cand]
                rows += [(rid, model_id, True) for rid in own + shared]
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    params = {"n_students": n_students, "n_candidates": n_candidates, "n_population": n_population,
              "null_student": null_student}
    if null_student and n_null_students != 1:  # recorded only when not the default, so existing plans compare equal
        params["n_null_students"] = n_null_students
    if keep_design != "lira":  # recorded only when not the default, so existing plans compare equal
        params["keep_design"] = keep_design
    if background:
        params["n_background"] = {d: len(v) for d, v in sorted(background.items())}
    if n_offline:
        params["n_offline"] = n_offline
        params["n_reference_records"] = {d: len(v) for d, v in sorted(reference_records.items())}
    return MembershipPlan("keep_matrix", seed, params, models, candidates, population, table,
                          background={d: background[d] for d in sorted(background)})


def disjoint_plan(candidates: Sequence[str], population: Sequence[str], *, domain: str, n_references: int,
                  records_per_reference: int, seed: int, external_references: Sequence[str] = (),
                  target_labels: dict[str, bool] | None = None, n_held_out: int = 0,
                  background: Sequence[str] = (), null_sample: Sequence[str] = ()) -> MembershipPlan:
    """Audit plan: references that never saw a candidate, and (for `leakaudit audit`) the given target.

    References: `external_references` (model paths or hub ids the auditor trained without any candidate; their
    plan.models entry records the path, and they are taken to be OUT for every record), or else `n_references`
    students trained on seeded subsets of `records_per_reference` population records. `n_held_out` population
    records (a seeded choice) are never trained on by any reference: RMIA compares against population records
    that are OUT for every reference. `background`: record ids every trained reference also trains on (the
    target's background set; never a candidate or population record). With `target_labels` (candidate id -> is_member, e.g. from the candidates'
    meta.is_member) the plan also holds a model "target" with those labels (no rows when unknown).
    `null_sample`: known non-members no reference trains on (never a candidate, population or background record),
    appended to the candidates so that they are sampled and scored alike, OUT for every model, labelled non-members
    when the candidates carry labels, and listed in params["null_sample"] (`MembershipPlan.null_sample`).
    """
    overlap = set(candidates) & set(population)
    if overlap:
        raise InputError(f"{len(overlap)} candidate records also appear in the population "
                         f"(e.g. {sorted(overlap)[0]}); references must exclude every candidate")
    clash = set(background) & (set(candidates) | set(population))
    if clash:
        raise InputError(f"background record {sorted(clash)[0]} is also a candidate or population record")
    clash = set(null_sample) & (set(candidates) | set(population) | set(background))
    if clash:
        raise InputError(f"null-sample record {sorted(clash)[0]} is also a candidate, population or background record")
    asked = list(candidates)
    candidates = asked + list(null_sample)
    if background and external_references:
        raise ConfigError("a background set is only for references trained here")
    pop = sorted(population)
    held = set(shuffled(pop, seed, f"held-out {domain}")[:n_held_out]) if n_held_out else set()
    trainable = [rid for rid in pop if rid not in held]
    rows, models = [], {}
    if external_references:
        for k, ref in enumerate(external_references):
            model_id = f"{domain}-ref{k}"
            models[model_id] = {"domain": domain, "role": "reference", "path": str(ref)}
            rows += [(rid, model_id, False) for rid in list(candidates) + pop]
    else:
        if n_references < 1:
            raise ConfigError("n_references must be >= 1")
        if not 1 <= records_per_reference <= len(trainable):
            raise ConfigError(f"records_per_reference={records_per_reference} must be in [1, {len(trainable)}] "
                              f"(population {len(pop)} records, {len(held)} held out)")
        for k in range(n_references):
            model_id = f"{domain}-ref{k}"
            models[model_id] = {"domain": domain, "role": "reference"}
            rng = np.random.default_rng(stable_seed(seed, "ref", domain, k))
            chosen = {trainable[i] for i in rng.choice(len(trainable), size=records_per_reference, replace=False)}
            rows += [(rid, model_id, False) for rid in candidates]
            rows += [(rid, model_id, rid in chosen) for rid in pop]
            rows += [(rid, model_id, True) for rid in background]
    params: dict = {"n_references": len(models), "records_per_reference": records_per_reference}
    if n_held_out:
        params["n_held_out"] = n_held_out
    if background:
        params["n_background"] = {domain: len(background)}
    if null_sample:
        params["null_sample"] = {domain: list(null_sample)}
    models[TARGET_ID] = {"domain": domain, "role": "target"}
    if target_labels is not None:
        target_labels = {**target_labels, **{rid: False for rid in null_sample}}
        missing = set(asked) - set(target_labels)
        if missing:
            raise InputError(f"no label for candidate {sorted(missing)[0]}", field="meta.is_member")
        rows += [(rid, TARGET_ID, bool(target_labels[rid])) for rid in candidates]
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    return MembershipPlan("disjoint", seed, params, models, {domain: list(candidates)},
                          {domain: list(population)}, table,
                          background={domain: list(background)} if background else {})
