"""What a run trains and scores, by domain: from the config alone, or from a prepared study's plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Workload:
    """What a run trains and scores, by domain (from the config alone, or from a prepared run's plan)."""

    trained: list[tuple[str, str, int]]
    """(domain, role, records it trains on) per model trained."""
    targets: list[tuple[str, int]]
    """(domain, candidates sampled) per target (null students included)."""
    fresh_scored: dict[str, float]
    """domain -> (model, record) pairs scoring trajectories, summed over targets."""
    fixed_scored: dict[str, int]
    """domain -> (model, record) pairs scoring fixed texts (each model its domain's candidates + population)."""
    scoring_jobs: int
    teacher_sft: dict[str, int]
    """domain -> records the prepared teacher fine-tunes on (empty: no prepared teacher)."""


def workload_from_config(cfg: Any) -> Workload:
    """The workload of a study from its config alone (the keep-matrix design: what leakaudit.membership plans)."""
    from leakaudit.membership import OFFLINE

    data, plan = cfg.data, cfg.plan
    half = data.n_candidates // 2
    n_null = plan.n_null_students if plan.null_student else 0
    k_match = plan.n_matched_references or plan.n_students // 2 - 1
    trained, targets, fresh, fixed, sft = [], [], {}, {}, {}
    for dom in data.domains:
        roles = [("student", plan.n_students), ("null", n_null), (OFFLINE, plan.n_offline_references)]
        trained += [(dom, role, half + data.n_background) for role, n in roles for _ in range(n)]
        targets += [(dom, data.n_candidates)] * (plan.n_students + n_null)
        # each trajectory: the target, the base, its k matched OUT references, every offline reference
        fresh[dom] = (plan.n_students + n_null) * data.n_candidates * (2 + k_match + plan.n_offline_references)
        n_models = plan.n_students + n_null + plan.n_offline_references
        fixed[dom] = (n_models + 1) * (data.n_candidates + data.n_population)
        if cfg.teacher.prepared:
            sft[dom] = data.n_population + data.n_teacher_records
    n_trained = len(trained)
    return Workload(trained, targets, fresh, fixed, n_trained + 1, sft)


def workload_from_study(study: Any, *, unfinished_only: bool = False) -> Workload:
    """The workload of a prepared leakaudit.study.Study (a study or an audit), read off its membership plan.
    `unfinished_only`: leave out the models (and the prepared teacher) already DONE in its run directory, so a
    resumed run's ETA counts only what is left to train (sampling and scoring are counted whole)."""
    from leakaudit.assemble import BASE_ID
    from leakaudit.io import is_done

    plan = study.plan()
    to_train = [m for m in study.trained_models() if not (unfinished_only and is_done(study.run.model(m)))]
    trained = [(plan.models[m]["domain"], plan.models[m]["role"], len(plan.members(m))) for m in to_train]
    views = plan.views()
    targets = [(v.domain, len(plan.candidates[v.domain])) for v in views]
    fresh: dict[str, float] = {}
    for v in views:
        for _, ids in study.fresh_scorers([v.target])[v.target].items():
            fresh[v.domain] = fresh.get(v.domain, 0) + (len(plan.candidates[v.domain]) if ids is None else len(ids))
    fixed: dict[str, int] = {}
    for m in [BASE_ID, *plan.models]:
        for d in (sorted(plan.candidates) if m == BASE_ID else [plan.models[m]["domain"]]):
            fixed[d] = fixed.get(d, 0) + len(plan.candidates[d]) + len(plan.population[d])
    sft: dict[str, int] = {}
    if study.cfg.teacher.prepared and not study.is_audit and not (unfinished_only and is_done(study.run.teacher)):
        for r in study.teacher_sft_records()[0]:
            sft[r.domain] = sft.get(r.domain, 0) + 1
    return Workload(trained, targets, fresh, fixed, len(plan.models) + 1, sft)
