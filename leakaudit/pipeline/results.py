"""The attacks and report stages: scores from the stored signals (leakaudit.scoring), then metrics and the report
(leakaudit.report); what a design adds to either comes from its hooks (leakaudit.pipeline.design)."""

from __future__ import annotations

from leakaudit.io import write_json, write_text
from leakaudit.pipeline.context import RunContext
from leakaudit.pipeline.design import Design
from leakaudit.pipeline.targets import drop_unanswered


def run_attacks(ctx: RunContext, design: Design) -> None:
    """scores.parquet (and the design's outputs beside it), without the records a given target could not answer
    for; then sample_literalness.json."""
    from leakaudit.literalness import load, sample_literalness, summary_line
    from leakaudit.scoring import score_targets

    plan, records = ctx.plan(), ctx.records()
    scores, leak_map = score_targets(ctx.run, plan, records, ctx.cfg, ctx.tokenizer, progress=ctx.progress,
                                     log=ctx.log)
    for target in ctx.targets.values():
        scores = drop_unanswered(scores, target, ctx.run)
    design.write_scores(ctx, scores, leak_map)
    write_json(ctx.run.sample_literalness, sample_literalness(ctx.run, plan, records, ctx.tokenizer))
    ctx.log(f"[attacks] {summary_line(*load(ctx.run.root))}")


def run_report(ctx: RunContext, design: Design, *, redact: bool) -> None:
    """metrics.json/.csv, plots and report.html (leakaudit.report.build_report); without ground-truth labels of
    both classes there are no metrics, and the report is the design's verdict page where it has one."""
    import pandas as pd

    from leakaudit.report import build_report

    labels = pd.read_parquet(ctx.run.scores, columns=["is_member"]).is_member
    if labels.isna().all() or labels.dropna().nunique() < 2:
        page = design.verdict_page(ctx)
        if page is not None:  # no metrics without labels: the report is the verdict against the null sample
            write_text(ctx.run.report_html, page)
        ctx.log("[report] no ground-truth labels with both classes (meta.is_member): the verdict and "
                "per-candidate p-values only, no metrics")
        return
    cfg = ctx.cfg
    build_report(ctx.run.root, redact=redact, n_boot=cfg.metrics.n_boot, seed=cfg.metrics.seed)
    from leakaudit.realism import load as load_realism, summary_line as realism_line

    ctx.log(f"[report] {realism_line(load_realism(ctx.run.root))}")
