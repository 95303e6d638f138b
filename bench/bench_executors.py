"""Benchmark: wall time of the tiny study with the local executor vs the Ray executor (the cost of the
engine on a small machine).

Each run is a fresh run directory of the tiny preset on a tiny random Llama (made once), timed end to end
(Study.run_all) with each stage's time from the study's log. The Ray run starts its own local instance inside
run_all (execution.address null, as `leakaudit run-study --set execution.backend=ray` does), so Ray's start-up is
counted (Ray schedules on os.cpu_count() CPUs; pin the process with taskset to bound the cores it really uses).
Writes bench/results/executors.json with the CPU model, the affinity
and thread counts, and the ray/local ratio.

    taskset -c 0 env OMP_NUM_THREADS=1 python bench/bench_executors.py            # tiny study, 2 interleaved pairs
    python bench/bench_executors.py --preset default                               # hours on a CPU: not run here
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path


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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--repeats", type=int, default=2, help="local/ray pairs, interleaved (the machine may be shared)")
    ap.add_argument("--out", default="bench/results/executors.json")
    args = ap.parse_args()

    import ray
    import torch

    from leakaudit.envinfo import cpu_info
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
    cpu = cpu_info()
    result = {
        "preset": args.preset, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "taskset -c 0 env OMP_NUM_THREADS=1 python bench/bench_executors.py",
        "cpu": {"model": cpu.get("model_name"), "cpu_count": cpu.get("cpu_count"),
                "affinity": sorted(os.sched_getaffinity(0)), "torch_threads": torch.get_num_threads(),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
        "ray": {"version": ray.__version__, "instance": "started by the study (execution.address null): "
                                                      "num_cpus = os.cpu_count(), start-up and shutdown counted"},
        "pairs": pairs,
        "local_wall_s": [p["local"]["wall_s"] for p in pairs], "ray_wall_s": [p["ray"]["wall_s"] for p in pairs],
        "ratio_ray_over_local_median": ratios[len(ratios) // 2] if len(ratios) % 2 else
        round((ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2, 3),
        "identical_scores_parquet": len({p[b]["scores_sha256"] for p in pairs for b in ("local", "ray")}) == 1,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
