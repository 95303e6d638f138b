"""Per-stage FLOP rates and per-job overheads of machine classes: fitted on stored runs' stage times, stored in
leakaudit/cost_rates.json, and turned into seconds on that machine."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from leakaudit.cost.estimate import STAGE_NAMES, StudyCost


@dataclass(frozen=True)
class CostRates:
    """Per stage, the FLOP rate a machine achieved and the seconds each job cost besides its FLOPs (loading models,
    starting a worker), fitted on earlier runs' stage times (`fit_rates`)."""

    machine: str
    source: str
    rates: dict[str, float]
    overhead_s: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stored_rates_path() -> Path:
    """The rates shipped with leakaudit (one entry per machine class; bench/cost_check.py writes them)."""
    return Path(__file__).parent.with_name("cost_rates.json")


def read_rates(path: str | Path | None = None) -> list[CostRates]:
    """Every stored rate set (an empty list when there is no file)."""
    p = Path(path) if path is not None else stored_rates_path()
    if not p.is_file():
        return []
    return [CostRates(machine=d["machine"], source=d["source"], rates={k: float(v) for k, v in d["rates"].items()},
                      overhead_s={k: float(v) for k, v in d.get("overhead_s", {}).items()})
            for d in json.loads(p.read_text(encoding="utf-8"))["machines"]]


def rates_for(machine: str, path: str | Path | None = None) -> CostRates | None:
    """The stored rate set of machine class `machine` (read_rates), None when there is none."""
    return next((r for r in read_rates(path) if r.machine == machine), None)


def write_rates(rates: CostRates, path: str | Path | None = None) -> None:
    """Store `rates`, replacing the entry of the same machine class."""
    p = Path(path) if path is not None else stored_rates_path()
    kept = [r for r in read_rates(p) if r.machine != rates.machine]
    doc = {"about": "per-stage FLOP rates and per-job overheads of machine classes, fitted on stored runs' stage times "
                    "by bench/cost_check.py (leakaudit.cost)",
           "machines": [r.to_dict() for r in sorted([*kept, rates], key=lambda r: r.machine)]}
    p.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def fit_rates(costs: Sequence[StudyCost], times: Sequence[Mapping[str, float]], *, machine: str,
              source: str) -> CostRates:
    """Per stage, seconds = FLOPs / rate + jobs * overhead, solved on two runs (least squares on more; a single run,
    or two that cannot separate the terms, gives the rate alone). An overhead that comes out negative is set to 0
    and the rate refitted."""
    import numpy as np

    rates, overhead = {}, {}
    for stage in STAGE_NAMES:
        rows = [(c.stages[stage].flops, c.stages[stage].jobs, t[stage]) for c, t in zip(costs, times)
                if c.stages[stage].flops and t.get(stage)]
        if not rows:
            continue
        a = np.array([[f, j] for f, j, _ in rows], dtype=float)
        y = np.array([t for _, _, t in rows], dtype=float)
        inv_rate, per_job = 0.0, 0.0
        if len(rows) >= 2 and np.linalg.matrix_rank(a) == 2:
            inv_rate, per_job = np.linalg.lstsq(a, y, rcond=None)[0]
        if per_job <= 0 or inv_rate <= 0:
            inv_rate, per_job = float(y.sum() / a[:, 0].sum()), 0.0
        rates[stage], overhead[stage] = 1.0 / float(inv_rate), float(per_job)
    return CostRates(machine=machine, source=source, rates=rates, overhead_s=overhead)


def seconds_here(cost: StudyCost, rates: CostRates) -> dict[str, float]:
    """Stage -> estimated seconds on the machine `rates` were measured on."""
    return {s: (c.flops / rates.rates[s] + c.jobs * rates.overhead_s.get(s, 0.0)
                if c.flops and rates.rates.get(s) else 0.0) for s, c in cost.stages.items()}
