"""The keep-matrix study: records drawn from the configured sources, M students per domain, each a target in turn.

Each domain's pool is loaded from its source, admitted (one domain, the token budget: leakaudit.data.admit) and cut
by leakaudit.membership.slice_pool into candidates + population (the records the plan is made of), teacher-only,
background and reference-only records. The plan is leakaudit.membership.keep_matrix_plan over the candidates and
population of every domain; the background and reference-only records are trained on by the students and offline
references it names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leakaudit.data.admit import admit
from leakaudit.data.records import Record, check_unique
from leakaudit.data.user_files import record_lines
from leakaudit.errors import ConfigError
from leakaudit.membership import MembershipPlan, keep_matrix_plan, slice_pool
from leakaudit.pipeline.context import RunContext
from leakaudit.pipeline.design import Design, Inputs


def load_domain(ctx: RunContext, domain: str, spec: Any) -> dict[str, list[Record]]:
    """A domain's records from its source, admitted, cut into its slices ({part: records} for every part of
    leakaudit.membership.POOL_PARTS), logged in one line."""
    from leakaudit.data.sources import load_source

    cfg, data = ctx.cfg, ctx.cfg.data
    options = dict(spec.options)
    if spec.source == "file":
        options.setdefault("domain", domain)  # fills rows without a domain of their own
    pool = load_source(spec.source, seed=cfg.seed, **options)
    where = str(options.get("path") or f"source '{spec.source}'")
    lines = record_lines(Path(options["path"])) if spec.source == "file" else None
    check_unique(pool, path=where)
    pool, dropped = admit(pool, source=spec.source, domain=domain, configured=f"data.domains.{domain}",
                          tokenizer=ctx.tokenizer, data=data, where=where, lines=lines)
    by_id = {r.record_id: r for r in pool}
    sizes = {"candidates": data.n_candidates, "population": data.n_population, "teacher": data.n_teacher_records,
             "background": data.n_background, "reference": data.n_reference_records}
    cut = slice_pool(list(by_id), sizes, cfg.seed, salt=domain)
    ctx.log(f"[records] {domain}: {len(pool)} from '{spec.source}' ({dropped} over the token budget dropped), "
            f"using {data.n_candidates} candidates + {data.n_population} population"
            + (f" + {data.n_teacher_records} teacher-only" if data.n_teacher_records else "")
            + (f" + {data.n_background} background" if data.n_background else "")
            + (f" + {data.n_reference_records} reference-only" if data.n_reference_records else ""))
    return {part: [by_id[r] for r in ids] for part, ids in cut.items()}


class KeepMatrixDesign(Design):
    """Studies: the keep matrix over every configured domain (leakaudit.membership.keep_matrix_plan)."""

    kind = "study"

    def inputs(self, ctx: RunContext) -> Inputs:
        """records.jsonl: every domain's candidates + population (in config order), then each domain's background,
        then each domain's reference-only records (sorted by domain); teacher_records.jsonl: the teacher-only
        records of every domain."""
        domains = {d: load_domain(ctx, d, spec) for d, spec in ctx.cfg.data.domains.items()}
        chosen = [r for recs in domains.values() for r in recs["candidates"] + recs["population"]]
        teacher = [r for recs in domains.values() for r in recs["teacher"]]
        background = {d: recs["background"] for d, recs in domains.items() if recs["background"]}
        reference = {d: recs["reference"] for d, recs in domains.items() if recs["reference"]}
        plan = self.plan(ctx.cfg, chosen, background, reference)
        extra = [r for part in (background, reference) for d in sorted(part) for r in part[d]]
        return Inputs(chosen + extra, teacher, plan)

    @staticmethod
    def plan(cfg: Any, records: list[Record], background: dict[str, list[Record]],
             reference: dict[str, list[Record]]) -> MembershipPlan:
        """The keep-matrix plan over `records` (each domain's candidates + population; the plan cuts them again
        with the same seed, as every plan made so far did)."""
        pools: dict[str, list[str]] = {}
        for r in records:
            pools.setdefault(r.domain, []).append(r.record_id)
        p = cfg.plan
        return keep_matrix_plan(pools, n_students=p.n_students, n_candidates=cfg.data.n_candidates,
                                n_population=cfg.data.n_population, seed=cfg.seed,
                                null_student=p.null_student, n_null_students=p.n_null_students,
                                keep_design=p.keep_design,
                                background={d: [r.record_id for r in recs] for d, recs in background.items()},
                                n_offline=p.n_offline_references,
                                reference_records={d: [r.record_id for r in recs] for d, recs in reference.items()})

    def check_config(self, cfg: Any) -> None:
        """The real targets must have every signal their attacks need, found now rather than after hours of
        training: the population comparison needs population records."""
        from attacks import get_attack
        from leakaudit.scoring import attack_specs

        if cfg.data.n_population > 0:
            return
        needing = [a.name for a in attack_specs(cfg.attacks)
                   if {"population_target", "population_refs"} & set(get_attack(a.name).needs)]
        if needing:
            raise ConfigError(f"data.n_population: attacks {needing} compare each record against population "
                              "records; set data.n_population > 0 or leave them out of `attacks`")
