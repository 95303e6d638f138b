"""`leakaudit audit`: the auditor's question about one deployed student.

The auditor holds a deployed student (the target), candidate records (was each one in its teacher's
privileged data?), and population records from the same distribution known to be outside it. References are
either given (students trained without any candidate) or trained here on population records with the same OPD
recipe (the `disjoint` membership design). Every candidate is then scored with Leaky and every baseline whose
signals exist; labels, when the candidates carry `meta.is_member`, turn the scores into metrics and a report.

Run directory: the study layout (records.jsonl, membership.parquet, models/, signals/, scores.parquet) plus
`candidates.csv` — one row per candidate, one column per attack, higher = more likely a member.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from attacks import AttackInputs
from leakaudit.config import load_config
from leakaudit.data.records import Record, read_jsonl, write_jsonl
from leakaudit.errors import InputError
from leakaudit.io import atomic_path, is_done, mark_done, write_json
from leakaudit.membership import disjoint_plan
from leakaudit.rundir import RunDir
from leakaudit.assemble import BASE_ID, stack_rows
from leakaudit.scoring import attack_rows, attack_specs
from leakaudit.study import stage_seed

TARGET_ID = "target"


@dataclass
class AuditRequest:
    target: str
    candidates: Path
    population: Path | None = None
    references: list[str] = field(default_factory=list)
    n_train_references: int = 4
    base_model: str = "smollm2-135m"
    out: Path = Path("runs/audit")
    overrides: list[str] = field(default_factory=list)
    """`--set` overrides applied to the default preset (training.*, signals.*, attacks, metrics.*, seed)."""
    redact: bool = False


def _labels(candidates: list[Record]) -> np.ndarray | None:
    """meta.is_member for every candidate, or None when any candidate lacks it."""
    vals = [c.meta.get("is_member") for c in candidates]
    if any(v is None for v in vals):
        return None
    return np.array([bool(v) for v in vals])


def run_audit(req: AuditRequest, *, log: Callable[[str], None] = print) -> Path:
    from leakaudit.models import load_tokenizer, resolve_model_ref
    from leakaudit.signals.backend import SamplingConfig, open_backend
    from leakaudit.signals.stages import sample_fresh, score_fixed, score_fresh
    from leakaudit.signals.store import has_logp, load_fixed, load_logp, load_trajectories

    cfg = load_config(preset="default", overrides=req.overrides)
    run = RunDir(req.out)
    resolve_model_ref(req.target)  # fail early on a bad target reference
    candidates = read_jsonl(req.candidates)
    population = read_jsonl(req.population) if req.population else []
    domain = candidates[0].domain
    run.root.mkdir(parents=True, exist_ok=True)
    write_jsonl(candidates + population, run.records)

    # ---- references ----------------------------------------------------------------------------------
    if req.references:
        ref_ids = {f"ref{k}": ref for k, ref in enumerate(req.references)}
        for ref in req.references:
            resolve_model_ref(ref)
    else:
        if not population:
            raise InputError("--population is required to train references (or pass --references)",
                             field="population")
        plan = disjoint_plan([c.record_id for c in candidates], [p.record_id for p in population], domain=domain,
                             n_references=req.n_train_references,
                             records_per_reference=max(1, len(population) // 2), seed=cfg.seed)
        plan.save(run.plan_dir)
        from shadow_models import OPDConfig, train_student

        by_id = {r.record_id: r for r in population}
        ref_ids = {}
        for model_id in plan.models:
            training = dict(cfg.training)
            training["seed"] = stage_seed(cfg.seed, "audit-train", model_id)
            log(f"[audit] training reference {model_id} on {len(plan.members(model_id))} population records")
            train_student(req.base_model, [by_id[r] for r in plan.members(model_id)], run.model(model_id),
                          OPDConfig(**training), model_id=model_id)
            ref_ids[model_id] = str(run.model(model_id))
    refs = list(ref_ids)

    # ---- signals -------------------------------------------------------------------------------------
    refs_of = {TARGET_ID: req.target, BASE_ID: req.base_model, **ref_ids}
    tokenizer = load_tokenizer(req.base_model)
    fresh_dir = run.fresh(TARGET_ID)
    backend_opts = dict(score_batch_size=cfg.signals.score_batch_size, autocast_bf16=cfg.signals.autocast_bf16)
    if not is_done(fresh_dir):
        sampling = dict(cfg.signals.sampling)
        sampling.setdefault("seed", stage_seed(cfg.seed, "audit-sample"))
        with open_backend(cfg.signals.backend, req.target, **backend_opts) as backend:
            sample_fresh(backend, tokenizer, candidates, SamplingConfig(**sampling), fresh_dir)
    for model_id, ref in refs_of.items():
        if run.fixed(model_id).is_file() and has_logp(fresh_dir, model_id):
            continue
        with open_backend(cfg.signals.backend, ref, **backend_opts) as backend:
            score_fixed(backend, tokenizer, candidates + population, run.fixed(model_id), vocab_stats=True)
            score_fresh(backend, model_id, fresh_dir)
    mark_done(fresh_dir, {"scored_by": list(refs_of)})

    # ---- attacks: every reference is OUT for every candidate (disjoint design) --------------------------
    trajs = load_trajectories(fresh_dir)
    lp = {m: load_logp(fresh_dir, m) for m in refs_of}
    fx = {m: load_fixed(run.fixed(m)) for m in refs_of}
    cand_ids = [c.record_id for c in candidates]
    labels = _labels(candidates)
    inputs = AttackInputs(
        record_ids=cand_ids, texts=[c.privileged for c in candidates],
        fresh_target=[[lp[TARGET_ID][r][j] for j in range(len(trajs[r]))] for r in cand_ids],
        fresh_refs=[[stack_rows([lp[m][r][j] for m in refs]) for j in range(len(trajs[r]))] for r in cand_ids],
        fresh_base=[[lp[BASE_ID][r][j] for j in range(len(trajs[r]))] for r in cand_ids],
        fixed_target=[fx[TARGET_ID][r].logp for r in cand_ids],
        fixed_target_mu=[fx[TARGET_ID][r].mu for r in cand_ids],
        fixed_target_sigma=[fx[TARGET_ID][r].sigma for r in cand_ids],
        fixed_base=[fx[BASE_ID][r].logp for r in cand_ids],
        fixed_refs=[stack_rows([fx[m][r].logp for m in refs]) for r in cand_ids],
        fixed_ref_in=[np.zeros(len(refs), dtype=bool) for _ in cand_ids],
        population_target=np.array([np.mean(fx[TARGET_ID][p.record_id].logp) for p in population])
        if population else None,
        population_refs=np.array([[np.mean(fx[m][p.record_id].logp) for m in refs] for p in population])
        if population else None,
        labels=labels,
    )
    scores = attack_rows(inputs, attack_specs(cfg.attacks), target=TARGET_ID, domain=domain,
                         skip_unavailable=True, log=log)
    table = (scores.pivot(index="record_id", columns="attack", values="score")
             .reindex(index=cand_ids, columns=list(dict.fromkeys(scores.attack))))
    if labels is not None:
        table["is_member"] = labels
    with atomic_path(run.root / "candidates.csv") as tmp:
        table.reset_index().to_csv(tmp, index=False)
    with atomic_path(run.scores) as tmp:
        scores.to_parquet(tmp, index=False)
    write_json(run.root / "audit.json", {"target": req.target, "base_model": req.base_model,
                                         "references": ref_ids, "n_candidates": len(candidates),
                                         "n_population": len(population), "labels": labels is not None,
                                         "config_hash": cfg.hash()})
    if labels is not None and labels.any() and not labels.all():
        from leakaudit.report import build_report

        build_report(run.root, redact=req.redact, n_boot=cfg.metrics.n_boot, seed=cfg.metrics.seed)
        log(f"[audit] labels found: metrics and report in {run.root}")
    return run.root / "candidates.csv"
