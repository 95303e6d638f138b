"""The students stage: one job per model of the plan the run trains and has not finished (leakaudit.pipeline.jobs
runs `train_one` in its worker); finished models are checked against the plan instead."""

from __future__ import annotations

import time
from typing import Any, Callable

from leakaudit.config import with_seed
from leakaudit.errors import InputError
from leakaudit.executors import Job
from leakaudit.io import is_done, read_json
from leakaudit.pipeline.context import JobRunner, RunContext
from leakaudit.pipeline.design import trained_models


def run_students(ctx: RunContext, jobs: JobRunner) -> None:
    """One job per trained model not yet DONE; DONE ones are checked against the plan here."""
    from leakaudit.progress import running_line, student_statuses

    plan = ctx.plan()
    todo = models_left(ctx)
    for model_id in trained_models(plan):
        if model_id not in todo:
            check_trained_on(ctx, model_id)
    n_steps = {m: steps_of(ctx, m) for m in todo}
    work = [Job(m, "leakaudit.pipeline.jobs:train_student_job", jobs.job_args(model_id=m)) for m in todo]
    started = time.time()  # staging ledgers older than this are a killed run's (progress.student_statuses)
    jobs.run_jobs("students", work,
                  detail=lambda: running_line(student_statuses(ctx.run, todo, n_steps, since=started)))


def models_left(ctx: RunContext) -> list[str]:
    """The plan's trained models without a DONE directory, in plan order: what the students stage trains (and what
    a resumed run's ETA prices, leakaudit.cost.workload)."""
    return [m for m in trained_models(ctx.plan()) if not is_done(ctx.run.model(m))]


def model_training(ctx: RunContext, model_id: str) -> Any:
    """The OPDConfig model_id trains under: the study's training section with its seed derived from the master
    seed and model_id (what train_one passes to the trainer, and what its checkpoint's fingerprint hashes)."""
    return with_seed(ctx.cfg.training, ctx.stage_seed("train", model_id))


def steps_of(ctx: RunContext, model_id: str) -> int:
    """How many optimizer steps model_id's training takes (its records, passes and batch size; not its seed)."""
    from shadow_models.plan import plan_steps

    t = ctx.cfg.training
    return len(plan_steps(len(ctx.plan().members(model_id)), t.epochs, t.batch_size, 0))


def training_left(ctx: RunContext) -> dict[str, float]:
    """models_left, in its order -> the fraction of the model's optimizer steps still to run: below 1 when a
    checkpoint this run would resume from (shadow_models.checkpoint.resumable_step) holds some of them. What a
    resumed run's ETA prices."""
    from shadow_models.checkpoint import checkpoint_fingerprint, resumable_step

    from leakaudit.io import checkpoint_dir

    left = {}
    for m in models_left(ctx):
        training, n_steps, done = model_training(ctx, m), steps_of(ctx, m), 0
        if training.save_checkpoints and n_steps:
            # the process count is the trainer's to know; a study trains each model in one process
            fingerprint = checkpoint_fingerprint(training, ctx.cfg.base_model, ctx.teacher_model(),
                                                 ctx.plan().members(m), 1)
            done = resumable_step(checkpoint_dir(ctx.run.model(m)), fingerprint, ignore=("num_processes",))
        left[m] = 1.0 - done / n_steps if n_steps else 1.0
    return left


def check_trained_on(ctx: RunContext, model_id: str) -> None:
    """InputError unless the finished models/<model_id> trained on the records the plan gives it."""
    out = ctx.run.model(model_id)
    trained_on = read_json(out / "meta.json").get("record_ids")
    if sorted(trained_on or []) != sorted(ctx.plan().members(model_id)):
        raise InputError(f"models/{model_id} was trained on other records than the plan gives it; "
                         "rerun with --force students", path=str(out))


def train_one(ctx: RunContext, model_id: str, step_hook: Callable[[dict], None] | None = None,
              epoch_hook: Callable[[int, Any], None] | None = None) -> None:
    """Train one model of the plan (skipped when its DONE marker exists and it was trained on the plan's
    records for it). Its seed derives from the master seed and model_id and is recorded in its meta.json.
    `step_hook` and `epoch_hook` reach shadow_models.train_student (after each step's ledger line; after each
    epoch's last step, with the model)."""
    import shadow_models

    out = ctx.run.model(model_id)
    plan, records = ctx.plan(), ctx.records()
    member_ids = plan.members(model_id)
    if is_done(out):
        check_trained_on(ctx, model_id)
        return
    training = model_training(ctx, model_id)
    # only the hooks given: stand-ins for train_student in tests (tests/test_positive_control.py) take neither
    hooks = {k: v for k, v in (("step_hook", step_hook), ("epoch_hook", epoch_hook)) if v is not None}
    ctx.log(f"[students] training {model_id} on {len(member_ids)} records")
    shadow_models.train_student(ctx.cfg.base_model, [records[r] for r in member_ids], out, training,
                                teacher_model=ctx.teacher_model(), model_id=model_id, progress=ctx.progress,
                                trust_remote_code=ctx.cfg.trust_remote_code, **hooks)
