"""How close `leakaudit run-study --dry-run`'s wall-time estimate comes to stored runs' stage times.

Calibrates the per-stage FLOP rates of a machine class on stored runs (leakaudit.cost: their stage times over their
FLOPs, token lengths measured on their records, regenerated from each run's study.yaml and seed as the dry run does),
stores them in leakaudit/cost_rates.json (what the dry run reads, one entry per machine class), then predicts other
stored runs of the same machine class from their study.yaml alone and writes predicted vs measured seconds per stage
to bench/results/cost_check.json (bench/benchlib.py's schema). Trains and scores nothing. A stored run is a folder of
results/ (its study.yaml, its metrics.json for the machine it ran on, its stage_times.log).

    python bench/cost_check.py [--calibrate RUN RUN] [--check RUN ...]
    python bench/cost_check.py --calibrate regime_math_prepared_e8_offline8_seed5 \
        regime_medical_prepared_offline4_seed0 --check      # the AMD AVX512-BF16 class: no run left to check
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import tempfile
from pathlib import Path

import benchlib

RUNS = benchlib.REPO / "results"
STAGE_LINE = re.compile(r"^\[(\w+)\] done in ([0-9.]+) s")


def stage_times(run: Path) -> dict[str, float]:
    out = {}
    for line in (run / "stage_times.log").read_text(encoding="utf-8").splitlines():
        m = STAGE_LINE.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def run_cost(run: Path):
    """(StudyCost, machine tag) of a stored run: lengths measured on its records (regenerated from its study.yaml and
    seed, as the dry run does; nothing is written) with its base model's tokenizer; the machine from its metrics.json's
    environment record."""
    from leakaudit.config import load_config
    from leakaudit.cost import measured_lengths, model_shape, study_cost
    from leakaudit.study import Study

    with tempfile.TemporaryDirectory(prefix="cost_check_") as tmp:  # a run directory that does not exist
        cfg = dataclasses.replace(load_config(run / "study.yaml"), out_root=tmp)
        study = Study(cfg, log=lambda message: None)
        study.prepare(start_executor=False)
        lengths = measured_lengths(list(study.records().values()), study.tokenizer, cfg.training.teacher_template)
    machine = json.loads((run / "metrics.json").read_text())["env"]["cpu"]["tag"]
    return study_cost(cfg, model_shape(cfg.base_model), lengths), machine


QWEN_SHAPES = {  # from the models' config.json on the hub (no network here)
    "Qwen/Qwen2.5-0.5B-Instruct": {"hidden_size": 896, "num_hidden_layers": 24, "intermediate_size": 4864,
                                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                                   "tie_word_embeddings": True},
    "Qwen/Qwen2.5-1.5B-Instruct": {"hidden_size": 1536, "num_hidden_layers": 28, "intermediate_size": 8960,
                                   "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                                   "tie_word_embeddings": True},
}


def preset_estimates(gpu: str = "H100") -> dict:
    """The GPU presets priced from their config alone (token budgets as lengths: upper bounds), on one `gpu`."""
    from leakaudit.config import load_config
    from leakaudit.cost import ModelShape, budget_lengths, gpu_classes, seconds_on_gpu, study_cost

    out = {}
    for preset in ("gpu-small", "gpu-paper"):
        cfg = load_config(preset=preset)
        shape = ModelShape.from_config(QWEN_SHAPES[cfg.base_model])
        cost = study_cost(cfg, shape, budget_lengths(cfg))
        on_gpu = seconds_on_gpu(cost, gpu_classes()[gpu])
        out[preset] = {**cost.to_dict(), "gpu": gpu, "seconds_on_one_gpu": on_gpu,
                       "hours_on_one_gpu": round(sum(on_gpu.values()) / 3600, 2)}
        print(f"{preset}: {cost.opd_steps} OPD steps, {sum(c.flops for c in cost.stages.values()) / 1e15:.0f} PFLOP, "
              f"peak {max(c.peak_bytes for c in cost.stages.values()) / 1e9:.0f} GB per job, "
              f"{out[preset]['hours_on_one_gpu']} h on one {gpu}")
    return out


def main(argv: list[str] | None = None) -> int:
    from leakaudit.cost import read_rates, seconds_here, write_rates

    ap = benchlib.parser("cost_check", __doc__)
    ap.add_argument("--calibrate", nargs="+", default=["regime_math_prepared_e8_seed2", "cpu-full-math_seed1"],
                    help="runs whose stage times fit the rates (two with different job counts fit the overhead)")
    ap.add_argument("--check", nargs="*", default=["cpu-full-math_seed0", "regime_math_prepared_e8_seed1",
                                                   "regime_code_prepared_e8_seed2", "cpu-full-code_seed0"],
                    help="runs made from scratch (no students or teacher reused from another run)")
    ap.add_argument("--rates-out", type=Path, default=None, help="default: leakaudit/cost_rates.json")
    a = ap.parse_args(argv)
    load = benchlib.load_average()

    from leakaudit.cost import fit_rates

    cal = [run_cost(RUNS / name) for name in a.calibrate]
    machines = {m for _, m in cal}
    if len(machines) != 1:
        raise SystemExit(f"calibration runs come from several machine classes: {sorted(machines)}")
    fitted = fit_rates([c for c, _ in cal], [stage_times(RUNS / name) for name in a.calibrate],
                       machine=machines.pop(), source="stage times of results/"
                       + " and ".join(a.calibrate) + " (Ray, 2 one-CPU workers on 2 cores)")
    doc = fitted.to_dict()
    write_rates(fitted, a.rates_out)
    stored = next(r for r in read_rates(a.rates_out) if r.machine == fitted.machine)
    rows = []
    for name in a.check:
        run = RUNS / name
        c, m = run_cost(run)
        predicted = seconds_here(c, stored)
        measured = stage_times(run)
        row = {"run": name, "machine": m, "stages": {}}
        for s in predicted:
            if s in measured:
                row["stages"][s] = {"predicted_s": round(predicted[s], 1), "measured_s": measured[s],
                                    "ratio": round(predicted[s] / measured[s], 3) if measured[s] else None}
        tot_p = sum(v["predicted_s"] for v in row["stages"].values())
        tot_m = sum(v["measured_s"] for v in row["stages"].values())
        row["total"] = {"predicted_s": round(tot_p, 1), "measured_s": tot_m, "ratio": round(tot_p / tot_m, 3)}
        rows.append(row)
        print(f"{name} ({m}): " + "; ".join(f"{s} {v['predicted_s']:.0f} s predicted / {v['measured_s']:.0f} s "
                                               f"measured ({v['ratio']})" for s, v in row["stages"].items())
              + f"; total {tot_p:.0f} / {tot_m:.0f} s ({row['total']['ratio']})")
    if not rows:
        return 0
    metrics = {"calibration": doc, "checks": rows, "gpu_presets": preset_estimates(),
               "note": "predicted = FLOPs (leakaudit.cost) / the calibration run's FLOP rate per stage; measured = "
                       "the run's stage_times.log"}
    benchlib.write_result(a.out, "cost_check", params=vars(a), metrics=metrics, load_before=load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
