"""The signals stage: 1) one job per target without trajectories samples them (`sample_one`); 2) once all are
sampled, one job per model with something left to score (`score_one`); 3) each target's fresh DONE, written here
once every model it needs has scored. Every job skips what is already stored, so a rerun redoes only what is
missing. leakaudit.pipeline.jobs runs `sample_one` and `score_one` in their workers."""

from __future__ import annotations

from dataclasses import dataclass

from leakaudit.assemble import BASE_ID
from leakaudit.config import with_seed
from leakaudit.executors import Job
from leakaudit.io import is_done, mark_done
from leakaudit.pipeline.context import JobRunner, RunContext


@dataclass(frozen=True)
class SignalsLeft:
    """What the signals stage has left to do, by what the run directory holds (everything on a new run)."""

    pending: list[str]
    """Targets whose fresh DONE is missing, in plan order."""
    to_sample: list[str]
    """Pending targets without trajectories."""
    scorers: dict[str, dict[str, list[str] | None]]
    """Pending target -> {model: record ids of its trajectories that model scores, None = all} (fresh_scorers)."""
    scoring: dict[str, tuple[bool, list[list]]]
    """Model -> (its fixed texts unscored, the [target, record ids] it scores), for every model with either; once
    one of a model's pending targets lacks its scores it rescores all of them, batched as an uninterrupted run
    batches them (score_one writes only the missing files)."""


def signals_left(ctx: RunContext) -> SignalsLeft:
    """What run_signals does next (and what a resumed run's ETA prices, leakaudit.cost.workload)."""
    from leakaudit.signals.store import has_logp, has_trajectories

    run, plan = ctx.run, ctx.plan()
    pending = [v.target for v in plan.views() if not is_done(run.fresh(v.target))]
    scorers = fresh_scorers(ctx, pending)
    needs: dict[str, list[list]] = {}
    for t in pending:
        for m, record_ids in scorers[t].items():
            needs.setdefault(m, []).append([t, record_ids])
    scoring = {}
    for m in [BASE_ID, *plan.models]:
        fixed_missing = not run.fixed(m).is_file()
        fresh = needs.get(m, [])
        if all(has_logp(run.fresh(t), m) for t, _ in fresh):
            fresh = []
        if fixed_missing or fresh:
            scoring[m] = (fixed_missing, fresh)
    return SignalsLeft(pending, [t for t in pending if not has_trajectories(run.fresh(t))], scorers, scoring)


def run_signals(ctx: RunContext, jobs: JobRunner) -> None:
    left = signals_left(ctx)
    # 1) fresh trajectories from each target (student prompt only)
    jobs.run_jobs("sample", [Job(f"sample:{t}", "leakaudit.pipeline.jobs:sample_job", jobs.job_args(target=t))
                             for t in left.to_sample])
    # 2) every model scores, once loaded: fixed texts of its domain(s) and the trajectories that need it (sampling
    # writes trajectories only, so what is left to score is as read before it)
    jobs.run_jobs("score", [Job(f"score:{m}", "leakaudit.pipeline.jobs:score_job",
                                jobs.job_args(model_id=m, fixed=fixed, fresh=fresh))
                            for m, (fixed, fresh) in left.scoring.items()])
    # 3) each target's fresh DONE, once every model it needs has scored
    for t in left.pending:
        mark_done(ctx.run.fresh(t), {"scored_by": left.scorers[t]})


def fresh_scorers(ctx: RunContext, targets: list[str]) -> dict[str, dict[str, list[str] | None]]:
    """target -> {model_id: the record ids of the target's trajectories that model scores, None = all}: the
    target itself, the base, its matched references (for the records they serve) and the domain's offline
    references (every candidate). Recorded in each target's fresh DONE marker as `scored_by`."""
    plan = ctx.plan()
    k_in, k_out = plan.reference_counts(ctx.cfg.plan.n_matched_references)
    views = {v.target: v for v in plan.views()}
    scorers = {t: plan.references(views[t], k_in, k_out).fresh_scorers(t, BASE_ID) for t in targets}
    for v in plan.offline_views():  # the offline references score every candidate of every target
        if v.target in scorers:
            for m, record_ids in plan.references(v, 0, 0).fresh_scorers(v.target, BASE_ID).items():
                scorers[v.target].setdefault(m, record_ids)
    return scorers


def sample_one(ctx: RunContext, target: str) -> None:
    """Sample a target's fresh trajectories of its domain's candidates (seed derived from the master seed and the
    target); nothing when they are stored already."""
    plan, records = ctx.plan(), ctx.records()
    view = next(v for v in plan.views() if v.target == target)
    sampling = with_seed(ctx.cfg.signals.sampling, ctx.stage_seed("sample", target))
    cands = [records[r] for r in plan.candidates[view.domain]]
    with ctx.open_backend(target) as backend:
        ctx.target(target).sample(backend, ctx.tokenizer, cands, sampling, ctx.run.fresh(target))


def score_one(ctx: RunContext, model_id: str, fixed: bool, fresh: list) -> None:
    """Load one model once; score its domain's fixed texts (`fixed`) and the targets' trajectories it is asked to
    (`fresh`: [target, record_ids or None] pairs), less the records a target could not answer for. Each output is
    skipped when stored already."""
    from leakaudit.signals.stages import score_fixed, score_fresh_all

    plan, records = ctx.plan(), ctx.records()
    with ctx.open_backend(model_id) as backend:
        # an API target without prompt log-probs cannot score fixed texts (its fixed attacks are skipped)
        if fixed and getattr(backend, "scores_fixed_texts", True):
            domains = sorted(plan.candidates) if model_id == BASE_ID else [plan.models[model_id]["domain"]]
            recs = [records[r] for d in domains for r in plan.candidates[d] + plan.population[d]]
            score_fixed(backend, ctx.tokenizer, recs, ctx.run.fixed(model_id), vocab_stats=True)
        todo = []
        for target, record_ids in fresh:
            if record_ids is not None:
                unanswered = ctx.target(target).unanswered(ctx.run)
                record_ids = [r for r in record_ids if r not in unanswered]
            todo.append((ctx.run.fresh(target), record_ids))
        if todo:
            score_fresh_all(backend, model_id, todo)
