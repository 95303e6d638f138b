"""An audit's own outputs of the attacks stage: null_scores.parquet, candidates.csv and audit.json with the verdict.

scores.parquet holds the candidates' rows only; the null sample's rows (known non-members no reference trained on,
scored like the candidates) go to null_scores.parquet, and leakaudit.verdict.audit_verdict compares the two.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from leakaudit.io import atomic_path, write_json
from leakaudit.membership import TARGET_ID, MembershipPlan
from leakaudit.pipeline.audit_plan import null_source_words
from leakaudit.pipeline.context import RunContext
from leakaudit.rundir import NULL_SCORES_FILE


def null_ids(plan: MembershipPlan) -> list[str]:
    """Every domain's null sample, in plan order."""
    return [r for d in plan.candidates for r in plan.null_sample(d)]


def split_null_scores(ctx: RunContext, scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the candidates' rows, the null sample's rows) of the attacks' scores; the null sample's are written to
    null_scores.parquet beside scores.parquet."""
    is_null = scores.record_id.isin(set(null_ids(ctx.plan())))
    with atomic_path(ctx.run.root / NULL_SCORES_FILE) as tmp:
        scores[is_null].to_parquet(tmp, index=False)
    return scores[~is_null].reset_index(drop=True), scores[is_null].reset_index(drop=True)


def write_audit_table(ctx: RunContext, scores: pd.DataFrame, null_scores: pd.DataFrame, recipe: dict) -> None:
    """candidates.csv: one row per candidate, one column per attack (higher = more likely a member), then the
    primary attack's conformal p_value and whether it is flagged; and audit.json: what was audited with what
    (the references' recipe, the attacks that ran) and the verdict (leakaudit.verdict.audit_verdict)."""
    from leakaudit.scoring import attack_specs

    cfg, plan = ctx.cfg, ctx.plan()
    cand_ids = [r for d in plan.candidates for r in plan.audit_candidates(d)]
    table = (scores.pivot(index="record_id", columns="attack", values="score")
             .reindex(index=cand_ids, columns=list(dict.fromkeys(scores.attack))))
    labels = {r: v for r, v in plan.labels(TARGET_ID).items() if r in set(cand_ids)}
    if labels:
        table["is_member"] = [labels[r] for r in cand_ids]
    verdict = _verdict(ctx, table, null_scores, cand_ids, labels)
    table["p_value"] = verdict["p_values"]
    table["flagged"] = verdict["flagged"]
    ctx.log(f"[verdict] {verdict['headline']}")
    with atomic_path(ctx.run.candidates_csv) as tmp:
        table.reset_index().to_csv(tmp, index=False)
    refs = {m: ctx.model_ref(m) for m, info in plan.models.items() if info["role"] == "reference"}
    given = ctx.targets.get(TARGET_ID)
    write_json(ctx.run.audit_json, {
        "target": cfg.audit.target, "base_model": cfg.base_model, "references": refs,
        "references_trained_here": not cfg.audit.references,
        "teacher": cfg.teacher.kind, "loss": cfg.training.loss,
        "reference_recipe": recipe,
        "attacks": {label: {"name": g.attack_name.iloc[0], "params": json.loads(g.params.iloc[0])}
                    for label, g in scores.groupby("attack", sort=False)},
        "n_candidates": len(cand_ids), "n_population": sum(map(len, plan.population.values())),
        "labels": bool(labels), "config_hash": cfg.hash(), "verdict": verdict,
        **(given.summary(ctx.run, scores, attack_specs(cfg.attacks), ctx.log) if given is not None else {})})


def _verdict(ctx: RunContext, table: pd.DataFrame, null_scores: pd.DataFrame, cand_ids: list[str],
             labels: dict[str, bool]) -> dict:
    """leakaudit.verdict.audit_verdict over the candidates' table (record x attack) and the null sample's rows,
    with the blind text check (a text-only classifier, candidates vs null sample)."""
    import numpy as np

    from leakaudit.verdict import BLIND_ATTACK, PRIMARY_ATTACK, audit_verdict

    cfg, plan = ctx.cfg, ctx.plan()
    nulls = null_ids(plan)
    null_table = null_scores.pivot(index="record_id", columns="attack", values="score").reindex(index=nulls)
    attacks = [a for a in dict.fromkeys(null_scores.attack) if a != BLIND_ATTACK and a in table.columns]
    scores = {a: (table[a].to_numpy(dtype=float), null_table[a].to_numpy(dtype=float)) for a in attacks}
    n_pop = sum(len(v) for v in plan.population.values())
    return audit_verdict(cand_ids, scores, primary=PRIMARY_ATTACK, fdr=cfg.audit.fdr, fpr=cfg.audit.fpr,
                         labels=np.array([labels[r] for r in cand_ids]) if labels else None,
                         blind=_blind_check(ctx, cand_ids, nulls),
                         null_source=null_source_words(cfg, len(nulls), n_pop),
                         n_boot=cfg.metrics.n_boot, seed=cfg.metrics.seed)


def _blind_check(ctx: RunContext, cand_ids: list[str], nulls: list[str]) -> Any:
    """(candidates' [N], null sample's [Z]) cross-validated blind text scores (candidate = 1, null = 0): the check
    that they are drawn alike; None when there are too few records to cross-validate."""
    import numpy as np

    from attacks import AttackInputs, run_attack
    from attacks.errors import AttackInputError
    from leakaudit.scoring import attack_specs
    from leakaudit.verdict import BLIND_ATTACK

    records = ctx.records()
    params = next((a.params for a in attack_specs(ctx.cfg.attacks) if a.name == BLIND_ATTACK), {})
    ids = cand_ids + nulls
    inputs = AttackInputs(record_ids=ids, texts=[records[r].privileged for r in ids],
                          labels=np.r_[np.ones(len(cand_ids), bool), np.zeros(len(nulls), bool)])
    try:
        s = run_attack(BLIND_ATTACK, inputs, params)
    except AttackInputError as e:
        ctx.log(f"[verdict] blind text check not run: {e}")
        return None
    return s[:len(cand_ids)], s[len(cand_ids):]
