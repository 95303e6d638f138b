"""The cost of a prepared leakaudit.study.Study: its dry run (`--dry-run`) and its per-stage estimate on this
machine (the study's ETA lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leakaudit.cost.estimate import StudyCost, study_cost
from leakaudit.cost.gpu import gpu_classes, seconds_on_gpu
from leakaudit.cost.lengths import budget_lengths, measured_lengths
from leakaudit.cost.printout import format_plan
from leakaudit.cost.rates import rates_for, read_rates, seconds_here
from leakaudit.cost.shapes import model_shape
from leakaudit.cost.workload import workload_from_study


def prepared_study_cost(study: Any, *, unfinished_only: bool = False) -> StudyCost:
    """The cost of a prepared leakaudit.study.Study: its plan's workload (`unfinished_only`: without what its
    run directory already holds, workload_from_study), its records' measured token lengths."""
    cfg = study.cfg
    lengths = measured_lengths(list(study.records().values()), study.tokenizer, cfg.training.teacher_template)
    return study_cost(cfg, model_shape(cfg.base_model, trust_remote_code=cfg.trust_remote_code),
                      {**budget_lengths(cfg), **lengths}, workload_from_study(study, unfinished_only=unfinished_only))


def estimate_here(study: Any, *, rates_path: str | Path | None = None) -> tuple[dict[str, float], str] | None:
    """(stage -> estimated seconds on this machine, the machine class the rates were fitted on) for a prepared
    study, counting only what its run directory does not yet hold (a resumed run's ETA); None when no stored
    rates match this machine class. For the study's per-stage ETA lines."""
    from leakaudit.envinfo import cpu_info

    machine = cpu_info()["tag"]
    rates = rates_for(machine, rates_path)
    if rates is None:
        return None
    return seconds_here(prepared_study_cost(study, unfinished_only=True), rates), machine


def dry_run(study: Any, *, gpu: str = "H100", dense_utilisation: float = 0.35, bandwidth_utilisation: float = 0.5,
            rates_path: str | Path | None = None) -> str:
    """Validate everything a run of `study` (a leakaudit.study.Study) would, write nothing, and return the plan with
    its cost (format_plan). Records are loaded (so their token lengths are measured); no model weights are."""
    from leakaudit.envinfo import cpu_info
    from leakaudit.errors import ConfigError

    cards = gpu_classes()
    if gpu not in cards:
        raise ConfigError(f"--gpu {gpu!r}: unknown GPU class; choose one of {', '.join(cards)}")
    study.prepare(start_executor=False)
    cfg = study.cfg
    cost = prepared_study_cost(study)
    machine = cpu_info()["tag"]
    rates = rates_for(machine, rates_path)
    here = seconds_here(cost, rates) if rates is not None else None
    on_gpu = seconds_on_gpu(cost, cards[gpu], dense_utilisation=dense_utilisation,
                            bandwidth_utilisation=bandwidth_utilisation, bf16=bool(cfg.training.bf16_autocast))
    text = format_plan(cost, here, rates, cards[gpu], on_gpu, (dense_utilisation, bandwidth_utilisation))
    if rates is None:
        text += f"\n(this machine is {machine}; stored rates: " + \
            (", ".join(r.machine for r in read_rates(rates_path)) or "none") + ": python bench/cost_check.py fits them)"
    return text
