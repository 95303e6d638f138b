"""Run every configured attack on every target and collect one long scores table (+ a leak map).

scores.parquet columns: record_id, target, domain, attack (display label), attack_name, family, params (JSON),
score (higher = more likely member; NaN = no tokens to score), is_member, null_check, label_source.
"""

from __future__ import annotations

import json
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from attacks import AttackInputs, get_attack, list_attacks, run_attack
from attacks.leaky import LeakyParams, token_gaps
from leakaudit.assemble import run_inputs
from leakaudit.attack_errors import user_errors_from_attacks
from leakaudit.config import AttackSpecConfig, StudyConfig
from leakaudit.data.records import Record
from leakaudit.errors import InputError
from leakaudit.membership import OFFLINE, MembershipPlan

REFERENCE_FIELDS = {"fresh_refs", "fixed_refs", "fixed_ref_in", "population_refs"}
"""AttackInputs fields that come from reference models (an attack reading none of them ignores the design)."""
OFFLINE_SUFFIX = "@offline"
"""Appended to an attack's label when a target is compared with its domain's offline references (the offline design:
online attacks replaced by their offline forms, `offline_attacks`)."""
from leakaudit.rundir import RunDir


def attack_specs(cfg_attacks: list[AttackSpecConfig]) -> list[AttackSpecConfig]:
    """The configured attacks, or every registered attack with default parameters."""
    if cfg_attacks:
        for a in cfg_attacks:
            get_attack(a.name)  # raises a clear error for an unknown name
        return cfg_attacks
    return [AttackSpecConfig(name=spec.name) for spec in list_attacks()]


def attack_rows(inputs: AttackInputs, specs: list[AttackSpecConfig], *, target: str, domain: str,
                null_check: bool = False, label_source: str | None = None, skip_unavailable: bool = False,
                log=print) -> pd.DataFrame:
    """Run each attack on one target's inputs; one long row per (record, attack) in the scores.parquet schema.

    skip_unavailable: an attack whose signals are absent (InputError, e.g. LiRA online without IN references in
    a disjoint-reference audit) is logged and left out instead of stopping the run.
    """
    labels = inputs.labels if inputs.labels is not None else np.full(inputs.n, np.nan)
    frames = []
    for a in specs:
        spec = get_attack(a.name)
        params = spec.params_cls(**a.params)
        try:
            with user_errors_from_attacks():
                scores = run_attack(a.name, inputs, params)
        except InputError as e:
            if not skip_unavailable:
                raise
            log(f"[attacks] skipping {a.name}: {e}")
            continue
        frames.append(pd.DataFrame({
            "record_id": inputs.record_ids, "target": target, "domain": domain,
            "attack": a.label or a.name, "attack_name": a.name, "family": spec.family,
            "params": json.dumps(_params_dict(params), sort_keys=True), "score": scores,
            "is_member": labels, "null_check": null_check, "label_source": label_source or target,
        }))
    return pd.concat(frames, ignore_index=True)


def reads_references(name: str) -> bool:
    """Whether the registered attack `name` reads any signal of reference models (REFERENCE_FIELDS)."""
    return bool(REFERENCE_FIELDS & set(get_attack(name).needs))


def offline_attacks(attacks: list[AttackSpecConfig]) -> list[AttackSpecConfig]:
    """The attacks where no reference trained on a candidate (audits, the offline design): the configured ones (empty
    = every registered attack), each one whose parameters make it read IN references (threat model IN+OUT) replaced,
    in place and with the same parameters, by the offline form it declares (attacks.registry.AttackSpec.offline_form):
        rmia (offline false)  -> rmia with offline true, labelled rmia_offline (or '<label>_offline')
        lira_online           -> lira_offline, labelled lira_offline (or '<label>_offline')
    An offline form already in the list with the same parameters is kept once (the default list holds
    lira_offline beside lira_online)."""
    out: list[AttackSpecConfig] = []
    for a in attack_specs(attacks):
        spec = get_attack(a.name)
        if spec.offline_form is not None and spec.threat_model_of(a.params or None) == "IN+OUT":
            name, settings = spec.offline_form
            label = f"{a.display}_offline" if a.display != a.name or name == a.name else ""
            a = AttackSpecConfig(name=name, params={**a.params, **settings}, label=label)
        if any(b.name == a.name and b.params == a.params for b in out):
            continue
        out.append(a)
    return out


def offline_design_specs(cfg_attacks: list[AttackSpecConfig]) -> list[AttackSpecConfig]:
    """What the offline design runs: the configured attacks that read references, in their offline forms
    (`offline_attacks`: online attacks replaced), each labelled '<label>@offline'."""
    return [AttackSpecConfig(name=a.name, params=a.params, label=f"{a.display}{OFFLINE_SUFFIX}")
            for a in offline_attacks(cfg_attacks) if reads_references(a.name)]


def score_targets(run: RunDir, plan: MembershipPlan, records: dict[str, Record], cfg: StudyConfig, tokenizer: Any,
                  *, progress: bool = True, log=print) -> tuple[pd.DataFrame, dict | None]:
    """Every attack on every view of the plan. A real study target must have every signal an attack needs (a
    missing one is a bug, so it raises); a null target may lack RMIA's population (its own training records are
    not a population) and an audit has no IN references (its config carries the offline forms instead,
    `offline_attacks`): there an unavailable attack is logged and left out. With offline references
    (plan.offline_views) every target is attacked a second time by the attacks that read references, in their
    offline forms, labelled '<label>@offline'."""
    specs = attack_specs(cfg.attacks)
    # with offline references only the attacks that read references differ from the matched-design rows
    offline_specs = offline_design_specs(cfg.attacks)
    frames = []
    best: tuple[float, Any, AttackInputs, str, str] | None = None  # score, view, inputs, record_id, selected
    # the leak map follows the first configured Leaky (its scores alone: variants sit on other scales)
    leaky_spec = next((a for a in specs if a.name == "leaky"), None)
    for view, inputs in tqdm(run_inputs(run, plan, records, cfg.plan.n_matched_references),
                             total=len(plan.views()) + len(plan.offline_views()), desc="attacks",
                             disable=not progress):
        offline = view.references == OFFLINE
        lenient = view.null_check or plan.models[view.target]["role"] == "target"
        rows = attack_rows(inputs, offline_specs if offline else specs, target=view.target, domain=view.domain,
                           null_check=view.null_check, label_source=view.label_source,
                           skip_unavailable=lenient, log=log)
        frames.append(rows)
        if offline or view.null_check or leaky_spec is None:
            continue
        asked = rows[~rows.record_id.isin(plan.null_sample(view.domain))]  # an audit's null sample is never drawn
        choice = leak_map_choice(asked, leaky_spec.label or leaky_spec.name)
        if choice is not None and (best is None or choice[0] > best[0]):
            score, record_id, selected = choice
            best = (score, view, inputs, record_id, selected)
    leak_map = None
    if best is not None:
        leak_map = _leak_map(run, best, tokenizer, LeakyParams(**leaky_spec.params).reference_reduction)
    return pd.concat(frames, ignore_index=True), leak_map


SELECTED_MEMBER = "the member with the highest Leaky score"
SELECTED_CANDIDATE = "the candidate with the highest Leaky score (membership unknown)"


def leak_map_choice(rows: pd.DataFrame, leaky_label: str) -> tuple[float, str, str] | None:
    """(score, record_id, what was selected) of the record whose leak map to draw, from one target's rows.

    With labels (a study, or an audit whose candidates carry them): the highest-scoring member. Without (an audit):
    the highest-scoring candidate, said so. NaN labels must not count as members (NaN is truthy: astype(bool) made
    every unlabelled candidate a "member"). None when no scored row is left."""
    leaky = rows[(rows.attack == leaky_label) & rows.score.notna()]
    labelled = leaky.is_member.notna().all()
    if labelled:
        leaky = leaky[leaky.is_member == 1]
    if leaky.empty:
        return None
    top = leaky.loc[leaky.score.idxmax()]
    return float(top.score), str(top.record_id), SELECTED_MEMBER if labelled else SELECTED_CANDIDATE


def _params_dict(params: Any) -> dict:
    return asdict(params) if is_dataclass(params) else dict(params or {})


def _leak_map(run: RunDir, best, tokenizer, reduction: str) -> dict:
    """Per-token gaps (target − max, or mean, of the OUT references, as the Leaky spec reduces them) on the fresh
    trajectories of the record leak_map_choice selected."""
    from leakaudit.signals.store import load_trajectories

    score, view, inputs, rid, selected = best
    i = inputs.record_ids.index(rid)
    token_ids = load_trajectories(run.fresh(view.target))[rid]
    out = []
    for tgt, refs, toks in zip(inputs.fresh_target[i], inputs.fresh_refs[i], token_ids):
        gaps = token_gaps(tgt, refs, reduction) if refs.size else np.asarray(tgt, dtype=np.float64)
        out.append({"tokens": [tokenizer.decode([int(t)]) for t in toks],
                    "gaps": [round(float(g), 4) for g in gaps]})
    return {"record_id": rid, "target": view.target, "domain": view.domain, "leaky_score": score,
            "selected": selected, "reference_reduction": reduction, "trajectories": out}
