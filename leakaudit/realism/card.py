"""The realism card of a finished run: every attacked target's entry and the levels pooled per domain; and
reading back a run's realism.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leakaudit.errors import LeakauditError
from leakaudit.io import read_json_or_none
from leakaudit.realism.definitions import BASE_QUALITY, DEFINITIONS
from leakaudit.realism.by_level import levels
from leakaudit.realism.target import target_card
from leakaudit.realism.tokenizer import tokenizer_loader


def realism_card(run_root: str | Path, *, tokenizer: Any = None) -> dict:
    """The realism card of a finished run (module docstring): {"definitions", "base_quality", "measured",
    "reason", "targets": [per TargetView], "domains": {domain: {"n_targets", "targets", "levels"}} pooled over
    the domain's real targets}. `tokenizer` decodes the samples (default: study.yaml's base_model's, loaded only
    when a target has fresh trajectories). Reads the run only; runs no model."""
    from leakaudit.data.records import read_jsonl
    from leakaudit.membership import PLAN_FILE, MembershipPlan
    from leakaudit.rundir import RunDir
    from leakaudit.yamlio import read_yaml

    run = RunDir(Path(run_root))
    card: dict = {"definitions": DEFINITIONS, "base_quality": BASE_QUALITY, "measured": False, "reason": None,
                  "targets": [], "domains": {}}
    if not (run.membership.is_file() and (run.plan_dir / PLAN_FILE).is_file()):
        card["reason"] = "no membership plan (membership.parquet, plan.json): no targets to describe"
        return card
    plan = MembershipPlan.load(run.plan_dir)
    config = (read_yaml(run.config) or {}) if run.config.is_file() else {}
    try:
        records = {r.record_id: r for r in read_jsonl(run.records)}
    except LeakauditError:
        records = {}
    get_tokenizer = tokenizer_loader(config, tokenizer)
    pooled: dict[str, dict] = {}
    for view in plan.views():
        entry, rows = target_card(run, plan, view, records, get_tokenizer)
        if not records and rows:
            entry["notes"].append("no records.jsonl: task quality not measured")
        card["targets"].append(entry)
        if not view.null_check and rows:
            acc = pooled.setdefault(view.domain, {"targets": [], "rows": [], "cap": None})
            acc["targets"].append(view.target)
            acc["rows"] += rows
            acc["cap"] = acc["cap"] or (entry["sampling"] or {}).get("max_new_tokens")
    card["domains"] = {d: {"n_targets": len(v["targets"]), "targets": v["targets"],
                           "levels": levels(v["rows"], v["cap"])} for d, v in sorted(pooled.items())}
    card["measured"] = True
    return card


def load(run_root: str | Path) -> dict | None:
    """realism.json of a run directory; None when the run has none (built before the card existed)."""
    from leakaudit.rundir import RunDir

    return read_json_or_none(RunDir(Path(run_root)).realism)
