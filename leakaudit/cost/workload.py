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
    `unfinished_only`: leave out what its run directory already holds (models and the prepared teacher DONE,
    targets' trajectories sampled, fresh and fixed scores written), so a resumed run's ETA counts what is left."""
    from leakaudit.assemble import BASE_ID
    from leakaudit.io import is_done
    from leakaudit.signals.store import has_logp, has_trajectories

    run = study.run

    def left(done: bool) -> bool:
        return not (unfinished_only and done)

    plan = study.plan()
    to_train = [m for m in study.trained_models() if left(is_done(run.model(m)))]
    trained = [(plan.models[m]["domain"], plan.models[m]["role"], len(plan.members(m))) for m in to_train]
    views = [v for v in plan.views() if left(is_done(run.fresh(v.target)))]
    targets = [(v.domain, len(plan.candidates[v.domain])) for v in views if left(has_trajectories(run.fresh(v.target)))]
    fresh: dict[str, float] = {}
    scoring = set()
    for v in views:
        for m, ids in study.fresh_scorers([v.target])[v.target].items():
            if left(has_logp(run.fresh(v.target), m)):
                scoring.add(m)
                fresh[v.domain] = fresh.get(v.domain, 0) + (len(plan.candidates[v.domain]) if ids is None else len(ids))
    fixed: dict[str, int] = {}
    for m in [BASE_ID, *plan.models]:
        if not left(run.fixed(m).is_file()):
            continue
        scoring.add(m)
        for d in (sorted(plan.candidates) if m == BASE_ID else [plan.models[m]["domain"]]):
            fixed[d] = fixed.get(d, 0) + len(plan.candidates[d]) + len(plan.population[d])
    sft: dict[str, int] = {}
    if study.cfg.teacher.prepared and not study.is_audit and left(is_done(run.teacher)):
        for r in study.teacher_sft_records()[0]:
            sft[r.domain] = sft.get(r.domain, 0) + 1
    return Workload(trained, targets, fresh, fixed, len(scoring) if unfinished_only else len(plan.models) + 1, sft)
