"""Benchmark: the signals stage's two shapes on this machine's cores, on a finished run's real students (
local vs Ray at the default study's scale, where a whole local-and-Ray pair of default studies costs hours).

bench/bench_students_parallel.py measures the students stage this way; this is its signals-stage twin. The signals
stage is two barriers of independent jobs (leakaudit.study.Study.stage_signals): one sampling job per target, then
one scoring job per model. The local executor runs them one after another in one process with every core; the Ray
executor with `execution.cpus_per_student=1` runs one job per core side by side (Ray sets a worker's
OMP_NUM_THREADS to its CPUs). Here, with `cores` = this process's CPU affinity (2 here):

- the first `cores` targets of the run's plan are sampled again, then the same `cores` students score what the real
  stage would give them (their domain's fixed texts, and of those targets' trajectories the records the plan makes
  them score: their own as a target, others' as a reference);
- local: one process, OMP threads = cores, pinned to all cores, runs the jobs in order (phase by phase);
- ray:   one process per core, 1 thread, each pinned to its core, one job each, started together per phase.

Each job is the Study method a Ray worker calls (sample_one / score_one), model load included, in a scratch copy
of the run directory (records, plan and config copied; models/ linked, read only), timed inside its process (a
phase's wall time, process start and imports included, is recorded beside it). Shapes alternate (local, ray, ray, local)
so a drift in the machine's load cancels. From the per-job seconds it projects the whole stage for a plan with
`--project-sample` sampling and `--project-score` scoring jobs (default: the default study's 9 and 10):
local = n x (local seconds per job), Ray = ceil(n / cores) x (Ray seconds per round).
Writes bench/results/signals_parallel.json (bench/benchlib.py's schema).

    python bench/bench_signals_parallel.py --run runs/sweep/regime_medical_prepared_offline4_seed0   # ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchlib
from leakaudit.io import is_done
from leakaudit.membership import PLAN_FILE
from leakaudit.rundir import RunDir
from pinned_processes import core_groups, start_pinned, wait_for_json


def _config(run: Path, at: Path) -> dict:
    """The run's config (a plain dict) with its run directory moved to `at` (name and out_root)."""
    from leakaudit.config import load_config

    config = load_config(RunDir(run).config).to_dict()
    config.update(name=at.name, out_root=str(at.parent.resolve()))
    return config


def _study(run: Path):
    from leakaudit.config import validate_config
    from leakaudit.study import Study

    return Study(validate_config(_config(run, run)), progress=False, log=lambda _: None)


def scratch_run(run: Path, where: Path) -> dict:
    """A scratch run directory holding the run's small inputs (config, records, plan) copied and its models linked
    (read only); returns the config (a plain dict) that points at it."""
    src, dst = RunDir(run), RunDir(where)
    where.mkdir(parents=True)
    for path in (src.config, src.records, src.teacher_records, src.membership, src.plan_dir / PLAN_FILE):
        if path.is_file():
            shutil.copy2(path, dst.root / path.relative_to(src.root))
    (where / "models").symlink_to((run / "models").resolve(), target_is_directory=True)
    return _config(run, where)


def choose_jobs(run: Path, cores: int) -> tuple[list[str], dict[str, list]]:
    """The first `cores` trained targets of the plan, and for each of them as a model what the real stage gives it
    to score of those targets' trajectories: [target, record_ids or None] pairs (Study.fresh_scorers)."""
    study = _study(run)
    targets = [v.target for v in study.plan().views() if is_done(study.run.model(v.target))][:cores]
    if len(targets) < cores:
        raise SystemExit(f"{run}: {len(targets)} trained targets, need {cores} (one per core)")
    fresh: dict[str, list] = {t: [] for t in targets}
    for t, scorers in study.fresh_scorers(targets).items():
        for m, ids in scorers.items():
            if m in fresh:
                fresh[m].append([t, ids])
    return targets, fresh


def worker(config_path: Path, jobs: list[str], fresh_path: Path, out: Path) -> None:
    """Run `jobs` ('sample:<target>' / 'score:<model>') in order in this process; per-job wall and CPU seconds."""
    from leakaudit.config import validate_config
    from leakaudit.study import Study

    study = Study(validate_config(json.loads(config_path.read_text())), progress=False, log=lambda _: None)
    fresh = json.loads(fresh_path.read_text())
    timings = []
    for job in jobs:
        kind, _, arg = job.partition(":")
        w, c = time.perf_counter(), time.process_time()
        if kind == "sample":
            study.sample_one(arg)
        else:
            study.score_one(arg, True, fresh[arg])
        timings.append({"job": job, "wall_s": round(time.perf_counter() - w, 2),
                        "cpu_s": round(time.process_time() - c, 2)})
    out.write_text(json.dumps(timings))


def run_phase(shape: str, phase_jobs: list[str], cores: list[int], config_path: Path, fresh_path: Path,
              workdir: Path) -> dict:
    """One phase (all sampling or all scoring jobs) in one shape; its wall seconds and each process's job times."""
    groups = core_groups(shape, cores)
    assign = [phase_jobs] if shape == "local" else [[j] for j in phase_jobs]
    procs = []
    for group, jobs in zip(groups, assign):
        out = workdir / f"{shape}_{time.time_ns()}.json"
        procs.append((out, start_pinned(group, [
            sys.executable, __file__, "--worker", "--config-json", str(config_path), "--fresh-json", str(fresh_path),
            "--jobs", ",".join(jobs), "--out", str(out)])))
    per_process, wall = wait_for_json(procs, f"{shape}: worker")
    return {"wall_s": round(wall, 1), "processes": per_process}


def run_shape(shape: str, run: Path, targets: list[str], fresh: dict, cores: list[int], workdir: Path) -> dict:
    config = scratch_run(run, workdir / f"{shape}_{time.time_ns()}")
    config_path, fresh_path = workdir / "config.json", workdir / "fresh.json"
    config_path.write_text(json.dumps(config))
    fresh_path.write_text(json.dumps(fresh))
    phases = {"sample": run_phase(shape, [f"sample:{t}" for t in targets], cores, config_path, fresh_path, workdir),
              "score": run_phase(shape, [f"score:{m}" for m in targets], cores, config_path, fresh_path, workdir)}
    shutil.rmtree(workdir / config["name"])
    return {"shape": shape, "threads_per_process": len(cores) if shape == "local" else 1, "phases": phases,
            "loadavg_1_5_15_after": list(os.getloadavg())}


def project(runs: list[dict], n_jobs: dict[str, int], n_cores: int) -> dict:
    """Whole-stage seconds for n jobs per phase: local runs them one by one (mean seconds per job), Ray in rounds
    of n_cores side by side (a round lasts as long as its slowest job). Job seconds are timed inside the worker, so
    neither shape counts the process's imports: the local executor imports once per study, a Ray worker once for
    all the tasks it runs."""
    out = {}
    for phase, n in n_jobs.items():
        local = statistics.fmean(t["wall_s"] for r in runs if r["shape"] == "local"
                                 for p in r["phases"][phase]["processes"] for t in p)
        ray_round = statistics.fmean(max(t["wall_s"] for p in r["phases"][phase]["processes"] for t in p)
                                     for r in runs if r["shape"] == "ray")
        out[phase] = {"jobs": n, "local_s_per_job": round(local, 1), "ray_s_per_round": round(ray_round, 1),
                      "local_s": round(n * local, 1), "ray_s": round(math.ceil(n / n_cores) * ray_round, 1)}
    local_total, ray_total = (sum(v[k] for v in out.values()) for k in ("local_s", "ray_s"))
    out["stage"] = {"local_s": round(local_total, 1), "ray_s": round(ray_total, 1),
                    "wall_ratio_local_over_ray": round(local_total / ray_total, 2)}
    return out


def main() -> None:
    ap = benchlib.parser("signals_parallel", __doc__)
    ap.add_argument("--run", help="a run directory whose students are trained (models/<id>/DONE)")
    ap.add_argument("--project-sample", type=int, default=9, help="sampling jobs of the stage to project (targets)")
    ap.add_argument("--project-score", type=int, default=10, help="scoring jobs of the stage to project (models)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config-json", help=argparse.SUPPRESS)
    ap.add_argument("--fresh-json", help=argparse.SUPPRESS)
    ap.add_argument("--jobs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(Path(args.config_json), args.jobs.split(","), Path(args.fresh_json), Path(args.out))
        return
    if not args.run:
        ap.error("--run is required")
    load = benchlib.load_average()
    run = Path(args.run)
    cores = sorted(os.sched_getaffinity(0))
    targets, fresh = choose_jobs(run, len(cores))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in ("local", "ray", "ray", "local"):
            runs.append(run_shape(shape, run, targets, fresh, cores, Path(tmp)))
            print(json.dumps({"shape": shape, **{p: v["wall_s"] for p, v in runs[-1]["phases"].items()}}), flush=True)
    metrics = {"command": " ".join(["python bench/bench_signals_parallel.py", *sys.argv[1:]]), "cores": cores,
               "targets": targets, "scores": fresh, "runs": runs,
               "projection": project(runs, {"sample": args.project_sample, "score": args.project_score}, len(cores))}
    benchlib.write_result(args.out, "signals_parallel", params=vars(args), metrics=metrics, load_before=load)
    print(json.dumps(metrics["projection"]))


if __name__ == "__main__":
    main()
