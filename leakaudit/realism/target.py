"""One target's entry of the realism card: its training set (meta.json), its sampling parameters (sampling.json),
and its stored samples' rows (tokens, log-probs, decoded texts, quality) summarised per level."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from leakaudit.data.records import Record
from leakaudit.errors import InputError
from leakaudit.io import read_json_or_none
from leakaudit.realism.definitions import LEVELS
from leakaudit.realism.by_level import levels
from leakaudit.realism.quality import QUALITY, QualityMeasure
from leakaudit.realism.rounding import rounded
from leakaudit.realism.tokenizer import decoder


def training_set(meta: Mapping[str, Any] | None, candidates: Sequence[str], population: Sequence[str]) -> dict | None:
    """What a model trained on, from its meta.json (None without one): n_records (len(record_ids)), n_members
    (record_ids that are candidates), n_population, n_background (meta's n_background when recorded, else the
    rest), background_source, epochs (passes), steps (optimizer steps; None when not recorded), member_fraction."""
    if meta is None or meta.get("record_ids") is None:
        return None
    trained = list(dict.fromkeys(meta["record_ids"]))
    cands, pop = set(candidates), set(population)
    n_members = sum(r in cands for r in trained)
    n_pop = sum(r in pop for r in trained)
    recorded = meta.get("n_background")
    n_bg = int(recorded) if recorded is not None else len(trained) - n_members - n_pop
    return {"n_records": len(trained), "n_members": n_members, "n_population": n_pop, "n_background": n_bg,
            "background_source": "meta.json n_background" if recorded is not None
            else "counted: trained records neither candidate nor population",
            "epochs": meta.get("epochs"), "steps": meta.get("steps"),
            "member_fraction": rounded(n_members / len(trained)) if trained else None}


def sampling_info(meta: Mapping[str, Any] | None) -> dict | None:
    """The sampling parameters of sampling.json's config (None without one) and whether the card's Monte-Carlo
    estimates are unbiased (temperature == 1 and top_p == 1), with a warning when they are not."""
    if meta is None:
        return None
    cfg = meta.get("config") or {}
    t, p = cfg.get("temperature", 1.0), cfg.get("top_p", 1.0)
    unbiased = float(t) == 1.0 and float(p) == 1.0
    return {"temperature": t, "top_p": p, "n_per_record": cfg.get("n_per_record"),
            "max_new_tokens": cfg.get("max_new_tokens"), "seed": cfg.get("seed"), "unbiased": unbiased,
            "warning": None if unbiased else (f"sampled at temperature {t}, top_p {p}: the KL and entropy "
                                              "estimates are of the sampler's distribution, not the target's")}


def target_rows(fresh_dir: Path, target: str, base_id: str, labels: Mapping[str, bool], held_out: Callable,
                records: Mapping[str, Record], decode: Callable | None, measure: QualityMeasure | None,
                context: Any) -> list[dict]:
    """One row per record with stored fresh trajectories: record_id, is_member (bool | None), held_out, tokens
    [n int arrays], logp_target / logp_base ([n float arrays] | None when not stored), texts ([n str] | None
    without a tokenizer), quality ({metric: [n values]} | None)."""
    from leakaudit.signals.store import has_logp, load_logp, load_trajectories

    trajs = load_trajectories(fresh_dir)
    lt = load_logp(fresh_dir, target) if has_logp(fresh_dir, target) else None
    lb = load_logp(fresh_dir, base_id) if has_logp(fresh_dir, base_id) else None
    rows = []
    for rid, toks in trajs.items():
        texts = decode(toks) if decode is not None else None
        rec = records.get(rid)
        quality = None
        if texts is not None and measure is not None and rec is not None and measure.applies(rec):
            scored = [measure.score(s, rec, context) for s in texts]
            quality = {k: [q[k] for q in scored] for k in (scored[0] if scored else {})} or None
        rows.append({"record_id": rid, "is_member": labels.get(rid), "held_out": held_out(rid), "tokens": toks,
                     "logp_target": lt.get(rid) if lt is not None else None,
                     "logp_base": lb.get(rid) if lb is not None else None, "texts": texts, "quality": quality})
    return rows


def _held_out_fn(view: Any, labels: Mapping[str, bool], meta: Mapping | None, candidates: set) -> Callable:
    """record_id -> True when the target never trained on it (a candidate outside meta.json's record_ids; without
    meta: a null target's every candidate, else a non-member), None when unknown."""
    if meta is not None and meta.get("record_ids") is not None:
        trained = set(meta["record_ids"])
        return lambda rid: (rid not in trained) if rid in candidates else None
    if view.null_check:
        return lambda rid: True if rid in candidates else None
    return lambda rid: (not labels[rid]) if rid in labels else None


def target_card(run: Any, plan: Any, view: Any, records: Mapping[str, Record],
                get_tokenizer: Callable) -> tuple[dict, list[dict]]:
    """(the card entry of one TargetView, its record rows for pooling). Missing inputs give None fields and a
    `notes` entry, never an error."""
    from leakaudit.assemble import BASE_ID
    from leakaudit.signals.store import has_logp, has_trajectories

    domain = view.domain
    candidates = list(plan.candidates.get(domain, []))
    meta = read_json_or_none(run.model(view.target) / "meta.json")
    labels = plan.labels(view.label_source) if view.label_source in plan.models else {}
    entry: dict = {"target": view.target, "domain": domain, "null_check": bool(view.null_check),
                   "label_source": view.label_source,
                   "training": training_set(meta, candidates, plan.population.get(domain, [])),
                   "sampling": None, "levels": {name: None for name in LEVELS}, "quality_measure": None, "notes": []}
    if entry["training"] is None:
        entry["notes"].append(f"no models/{view.target}/meta.json with record_ids (a model this run did not train, "
                              "or an unfinished one): training set not known")
    fresh = run.fresh(view.target)
    if not has_trajectories(fresh):
        entry["notes"].append(f"no fresh trajectories in signals/fresh/{view.target}: KL, entropy and quality not "
                              "measured")
        return entry, []
    entry["sampling"] = sampling_info(read_json_or_none(fresh / "sampling.json"))
    for model_id, what in ((view.target, "KL and entropy"), (BASE_ID, "KL")):
        if not has_logp(fresh, model_id):
            entry["notes"].append(f"no logp__{model_id}.npz in signals/fresh/{view.target}: {what} not measured")
    measure = QUALITY.get(domain)
    tok, why = get_tokenizer()
    if measure is None:
        entry["notes"].append(f"no task-quality measure for domain {domain!r} (measures: {', '.join(QUALITY)})")
    elif tok is None:
        entry["notes"].append(why)
    else:
        entry["quality_measure"] = measure.definition
    context = measure.context([r for r in records.values() if r.domain == domain]) if measure else None
    try:
        rows = target_rows(fresh, view.target, BASE_ID, labels, _held_out_fn(view, labels, meta, set(candidates)),
                           records, decoder(tok) if tok is not None else None, measure, context)
    except InputError as e:
        entry["notes"].append(f"signals/fresh/{view.target} not readable ({e}): KL, entropy and quality not "
                              "measured")
        return entry, []
    cap = (entry["sampling"] or {}).get("max_new_tokens")
    entry["levels"] = levels(rows, cap)
    return entry, rows
