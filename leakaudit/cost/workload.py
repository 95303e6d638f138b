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
    trained_left: list[float] | None = None
    """Per model of `trained`, the fraction of its steps still to run (a resumed checkpoint holds the rest);
    None: all of every model's."""


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
    `unfinished_only`: only what its stages have left to do by their own reading of the run directory
    (`training_left`, `signals_left`, `teacher_to_prepare`: the decisions the stages act on, training_left also
    counting the steps a checkpoint already holds), so a resumed run's ETA counts what is left and nothing else."""
    from leakaudit.assemble import BASE_ID

    plan = study.plan()
    domain_of = {v.target: v.domain for v in plan.views()}
    if unfinished_only:
        left = study.signals_left()
        fraction_left = study.training_left()  # models_left, in its order -> fraction of steps to run
        to_train, to_sample = list(fraction_left), left.to_sample
        trained_left: list[float] | None = list(fraction_left.values())
        scored = [(t, ids) for _, fresh in left.scoring.values() for t, ids in fresh]  # (target, record ids)
        fixed_models = [m for m, (fixed, _) in left.scoring.items() if fixed]
        n_scoring, prepares_teacher = len(left.scoring), study.teacher_to_prepare()
    else:
        to_train, to_sample, trained_left = study.trained_models(), list(domain_of), None
        scored = [(t, ids) for t, by_model in study.fresh_scorers(to_sample).items() for ids in by_model.values()]
        fixed_models = [BASE_ID, *plan.models]
        n_scoring, prepares_teacher = len(plan.models) + 1, study.cfg.teacher.prepared
    trained = [(plan.models[m]["domain"], plan.models[m]["role"], len(plan.members(m))) for m in to_train]
    targets = [(domain_of[t], len(plan.candidates[domain_of[t]])) for t in to_sample]
    fresh: dict[str, float] = {}
    for target, ids in scored:
        d = domain_of[target]
        fresh[d] = fresh.get(d, 0) + (len(plan.candidates[d]) if ids is None else len(ids))
    fixed: dict[str, int] = {}
    for m in fixed_models:
        for d in (sorted(plan.candidates) if m == BASE_ID else [plan.models[m]["domain"]]):
            fixed[d] = fixed.get(d, 0) + len(plan.candidates[d]) + len(plan.population[d])
    sft: dict[str, int] = {}
    if prepares_teacher and not study.is_audit:
        for r in study.teacher_sft_records()[0]:
            sft[r.domain] = sft.get(r.domain, 0) + 1
    return Workload(trained, targets, fresh, fixed, n_scoring, sft, trained_left)
