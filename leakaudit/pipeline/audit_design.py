"""The disjoint audit: one given target, references that never saw a candidate, a verdict against a null sample.

Records are the auditor's files (leakaudit.pipeline.audit_records). The plan is leakaudit.membership.disjoint_plan:
references given (--references) or trained here on population records (leakaudit.pipeline.audit_plan.reference_sizes), the null
sample given (--null-sample) or split off the population (leakaudit.pipeline.audit_plan.split_null_sample), the target's labels
from the candidates' meta.is_member when every candidate has one. The target is a model or an API endpoint
(leakaudit.pipeline.targets). Beside the common outputs the attacks stage writes null_scores.parquet,
candidates.csv and audit.json (leakaudit.pipeline.audit_outputs); without labels the report is the verdict.
"""

from __future__ import annotations

from typing import Any

from leakaudit.pipeline.audit_plan import recipe_line, reference_recipe, reference_sizes, split_null_sample
from leakaudit.membership import TARGET_ID, MembershipPlan, disjoint_plan
from leakaudit.pipeline.audit_outputs import split_null_scores, write_audit_table
from leakaudit.pipeline.audit_records import AuditRecords, read_audit_records
from leakaudit.pipeline.context import RunContext
from leakaudit.pipeline.design import Design, Inputs
from leakaudit.pipeline.targets import Target, given_target


class DisjointAuditDesign(Design):
    """Audits (a config with an `audit` section). `recipe_sources`: where each part of the references' recipe came
    from (leakaudit.audit.recipe_sources), written to audit.json; None = the run's config (a resumed run)."""

    kind = "audit"

    def __init__(self, recipe_sources: dict[str, str] | None = None):
        self.recipe_sources = recipe_sources

    def inputs(self, ctx: RunContext) -> Inputs:
        given = read_audit_records(ctx.cfg.audit, ctx.tokenizer, ctx.cfg.data)
        return Inputs(given.all(), [], self.plan(ctx.cfg, given))

    @staticmethod
    def plan(cfg: Any, given: AuditRecords) -> MembershipPlan:
        """The disjoint design with the given target; its labels are the candidates' meta.is_member when every
        candidate has one."""
        audit, cands = cfg.audit, given.candidates
        labels = [c.meta.get("is_member") for c in cands]  # each true, false or absent (check_audit_label)
        target_labels = ({c.record_id: bool(v) for c, v in zip(cands, labels)}
                         if all(v is not None for v in labels) else None)
        domain = cands[0].domain
        pop_ids = [p.record_id for p in given.population]
        if given.null_sample:
            null = [r.record_id for r in given.null_sample]
        else:  # the null sample is split off the population: no reference trains on it
            null, pop_ids = split_null_sample(pop_ids, audit.null_size, cfg.seed, domain)
        held_out, per_ref = reference_sizes(audit, len(pop_ids))
        return disjoint_plan([c.record_id for c in cands], pop_ids, domain=domain,
                             n_references=audit.n_references, records_per_reference=per_ref, seed=cfg.seed,
                             external_references=audit.references, target_labels=target_labels,
                             n_held_out=held_out, background=[r.record_id for r in given.background],
                             null_sample=null)

    def given_targets(self, cfg: Any) -> dict[str, Target]:
        return {TARGET_ID: given_target(TARGET_ID, cfg.audit.target, cfg.audit)}

    def given_models(self, cfg: Any) -> dict[str, str]:
        """The references the auditor gave (--references), keyed reference0, reference1, ..."""
        return {f"reference{k}": r for k, r in enumerate(cfg.audit.references)}

    def recipe(self, ctx: RunContext) -> dict:
        """audit.json's reference_recipe (leakaudit.pipeline.audit_plan.reference_recipe): how the references were made."""
        return reference_recipe(ctx.cfg, ctx.plan(), self.recipe_sources)

    def start_lines(self, ctx: RunContext) -> list[str]:
        return [f"[audit] {recipe_line(self.recipe(ctx))}"]

    def write_scores(self, ctx: RunContext, scores: Any, leak_map: dict | None) -> None:
        """null_scores.parquet, then the candidates' rows in scores.parquet and leak_map.json, then candidates.csv
        and audit.json."""
        scores, null_scores = split_null_scores(ctx, scores)
        super().write_scores(ctx, scores, leak_map)
        write_audit_table(ctx, scores, null_scores, self.recipe(ctx))

    def verdict_page(self, ctx: RunContext) -> str | None:
        from leakaudit.report.verdict_section import verdict_page

        return verdict_page(ctx.run.root)
