"""The teacher stage: prepare the teacher (kind 'prepared', 'restated' or 'plan'), then measure how literal it is, whatever
its kind (teacher_literalness.json, leakaudit.literalness)."""

from __future__ import annotations

import contextlib

from leakaudit.config import with_seed
from leakaudit.data.records import Record
from leakaudit.io import is_done, read_json, write_json
from leakaudit.locks import launch_ranks, made_once
from leakaudit.pipeline.context import RunContext


def run_teacher(ctx: RunContext) -> None:
    teacher = ctx.cfg.teacher
    # one preparer at a time: a job array of `leakaudit train --model-id` calls this from every job; the processes
    # of one `accelerate launch` prepare it together instead (no lock), and only its rank 0 measures it
    world, rank = launch_ranks()
    with made_once(ctx.run.teacher) if world == 1 else contextlib.nullcontext():
        if teacher_to_prepare(ctx):
            from shadow_models.teacher_prep import prepare_teacher

            population, candidates = teacher_sft_records(ctx)
            prep = with_seed(teacher.prep, ctx.stage_seed("teacher"))
            ctx.log(f"[teacher] preparing a teacher ({teacher.kind}: SFT target {teacher.sft_target}) on "
                    f"{len(population)} population and teacher-only records (never candidates)")
            prepare_teacher(ctx.cfg.base_model, population, ctx.run.teacher, prep, forbidden_ids=candidates,
                            trust_remote_code=ctx.cfg.trust_remote_code, sft_target=teacher.sft_target)
        if rank == 0:
            measure_teacher(ctx)


def teacher_to_prepare(ctx: RunContext) -> bool:
    """Whether the run's teacher is one it prepares and the run directory lacks it (DONE)."""
    return ctx.cfg.teacher.prepared and not is_done(ctx.run.teacher)


def teacher_sft_records(ctx: RunContext) -> tuple[list[Record], list[str]]:
    """(records a prepared teacher is fine-tuned on: the population, then the teacher-only records; every
    candidate id: prepare_teacher refuses to train on any of them)."""
    plan, records = ctx.plan(), ctx.records()
    population = [records[r] for d in sorted(plan.population) for r in plan.population[d]]
    population += ctx.teacher_records()
    candidates = [r for d in plan.candidates for r in plan.candidates[d]]
    return population, candidates


def measure_teacher(ctx: RunContext) -> None:
    """teacher_literalness.json: which teacher this run uses and its log p of the candidates' privileged
    texts (and restatements) with vs without context (leakaudit.literalness)."""
    from leakaudit.literalness import measure_teacher as measure, summary_line

    if ctx.run.teacher_literalness.is_file():
        return
    plan, records, cfg = ctx.plan(), ctx.records(), ctx.cfg
    teacher = cfg.teacher
    ref = ctx.teacher_model() or cfg.base_model
    s = cfg.signals
    cands = [records[r] for d in sorted(plan.candidates) for r in plan.candidates[d]]
    measured = measure(ref, ctx.tokenizer, cands, cfg.training.teacher_template,
                       backend=s.backend, trust_remote_code=cfg.trust_remote_code,
                       score_batch_size=s.score_batch_size, autocast_bf16=s.autocast_bf16,
                       vllm_stats_topk=s.vllm_stats_topk, share_prefix=s.share_prefix, share_prefill=s.share_prefill)
    meta = read_json(ctx.run.teacher / "meta.json") if teacher.prepared else {}
    sft = {k: meta[k] for k in ("n_records", "n_records_given", "restate_rules", "left_out_record_ids") if k in meta}
    out = {"teacher": teacher.kind,
           "teacher_model": "base" if teacher.kind == "self" else "models/_teacher" if teacher.prepared else ref,
           "sft_target": teacher.sft_target, "sft": sft or None, **measured}
    write_json(ctx.run.teacher_literalness, out)
    ctx.log(f"[teacher] {summary_line(out, None)}")
