"""Benchmark: wall time of the tiny study with the local executor vs the Ray executor (the cost of the
engine on a small machine).

Each run is a fresh run directory of the tiny preset on a tiny random Llama (made once), timed end to end
(Study.run_all) with each stage's time from the study's log. The Ray run starts its own local instance inside
run_all (execution.address null, as `leakaudit run-study --set execution.backend=ray` does), so Ray's start-up is
counted (Ray schedules on os.cpu_count() CPUs; pin the process with taskset to bound the cores it really uses).
Writes bench/results/executors.json (bench/benchlib.py's schema: the machine record holds the CPU, the affinity and
thread counts) with each pair's times and the ray/local ratio.

    taskset -c 0 env OMP_NUM_THREADS=1 python bench/bench_executors.py            # tiny study, 2 interleaved pairs
    python bench/bench_executors.py --preset default                               # hours on a CPU: not run here
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path

import benchlib


def run_study(preset: str, base_model: str | None, out_root: Path, backend: str, extra: list[str]) -> dict:
    from leakaudit.config import load_config
    from leakaudit.study import Study

    overrides = [f"out_root={out_root}", f"name={preset}-{backend}", f"execution.backend={backend}",
                 "execution.gpus_per_student=0", *extra]
    if base_model:
        overrides.append(f"base_model={base_model}")
    cfg = load_config(preset=preset, overrides=overrides)
    stages: dict[str, float] = {}

    def log(message: str) -> None:
        m = re.match(r"\[(\w+)\] done in ([\d.]+) s", message)
        if m:
            stages[m.group(1)] = float(m.group(2))

    start = time.perf_counter()
    root = Study(cfg, progress=False, log=log).run_all()
    return {"backend": backend, "wall_s": round(time.perf_counter() - start, 2), "stages_s": stages,
            "scores_sha256": _sha256(root / "scores.parquet")}


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = benchlib.parser("executors", __doc__)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--repeats", type=int, default=2, help="local/ray pairs, interleaved (the machine may be shared)")
    args = ap.parse_args()
    benchlib.apply_threads(args)
    load = benchlib.load_average()

    import ray
    import torch

    from leakaudit.models import make_tiny_llama

    work = Path(tempfile.mkdtemp(prefix="bench_executors_"))
    base = str(make_tiny_llama(work / "tiny", seed=0)) if args.preset == "tiny" else None
    pairs = []
    for k in range(args.repeats):
        local = run_study(args.preset, base, work / f"r{k}", "local", [])
        # Ray gives a task OMP_NUM_THREADS = its num_cpus: as many as this process computes with, so scores match
        on_ray = run_study(args.preset, base, work / f"r{k}", "ray",
                           [f"execution.cpus_per_student={torch.get_num_threads()}"])
        pairs.append({"local": local, "ray": on_ray,
                      "ratio_ray_over_local": round(on_ray["wall_s"] / local["wall_s"], 3),
                      "loadavg_1_5_15_after": list(os.getloadavg())})  # the machine may be shared
    ratios = sorted(p["ratio_ray_over_local"] for p in pairs)
    metrics = {
        "command": "taskset -c 0 env OMP_NUM_THREADS=1 python bench/bench_executors.py",
        "ray": {"version": ray.__version__, "instance": "started by the study (execution.address null): "
                                                      "num_cpus = os.cpu_count(), start-up and shutdown counted"},
        "pairs": pairs,
        "local_wall_s": [p["local"]["wall_s"] for p in pairs], "ray_wall_s": [p["ray"]["wall_s"] for p in pairs],
        "ratio_ray_over_local_median": ratios[len(ratios) // 2] if len(ratios) % 2 else
        round((ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2, 3),
        "identical_scores_parquet": len({p[b]["scores_sha256"] for p in pairs for b in ("local", "ray")}) == 1,
    }
    benchlib.write_result(args.out, "executors", params=vars(args), metrics=metrics, load_before=load)
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
