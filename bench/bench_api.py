"""API audit throughput: the ApiBackend against the local test server (bench/api_server.py).

Measures
- requests/s and sampled tokens/s of ApiBackend.sample at 1, 4 and 16 concurrent requests (a fresh journal per
  run, so every request is sent; one request = n trajectories of one prompt, n honoured by the server), each
  level repeated --reps times interleaved, the median repetition reported with all of them;
- the wall time of `leakaudit audit` on the same records with the target over the API vs the target loaded
  locally (the same given reference, base and seed; the API run includes its capabilities probe), and whether
  their attack scores agree.
Writes bench/results/api.json (bench/benchlib.py's schema). The server and this client share one core (taskset -c 0):
the test server holds one lock around its model, so it answers one request at a time, and concurrency can only overlap
HTTP, JSON and the client's parsing with the model's compute. vLLM batches concurrent requests, so a real server's
scaling with concurrency is far larger; these numbers bound the client's own overhead, not a server's throughput.

Run:  taskset -c 0 env OMP_NUM_THREADS=1 PYTHONPATH=. python bench/bench_api.py [--model tiny|smollm2-135m]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import benchlib


def _records(k: int):
    from leakaudit.data.records import Record

    return [Record("math", f"What is {a} times {b}? Explain each step.", f"{a} times {b} is {a * b}.",
                   answer=str(a * b), source="bench") for a, b in [(2 + i, 3 + 2 * i) for i in range(k)]]


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(url: str, tokenizer, state: Path, prompts, cfg, concurrency: int, server_pid: int) -> dict:
    """One run of ApiBackend.sample over `prompts`, timed by the wall clock and by the CPU time of this process
    and of the server (a core shared with other jobs stretches the wall clock, much less the CPU clock)."""
    from leakaudit.signals.api_backend import ApiBackend, ApiOptions

    shutil.rmtree(state, ignore_errors=True)
    b = ApiBackend(url, tokenizer, ApiOptions(model="bench", api_key_env="", concurrency=concurrency), state)
    cpu0, srv0 = time.process_time(), cpu_seconds(server_pid)
    start = time.perf_counter()
    out = b.sample(prompts, cfg)
    wall = time.perf_counter() - start
    client_cpu, server_cpu = time.process_time() - cpu0, cpu_seconds(server_pid) - srv0
    n_tok = sum(len(t) for per in out for t in per)
    return {"concurrency": concurrency, "requests": b.sent["sample"], "tokens": n_tok, "seconds": round(wall, 3),
            "requests_per_s": round(b.sent["sample"] / wall, 2), "tokens_per_s": round(n_tok / wall, 1),
            "client_cpu_s": round(client_cpu, 3), "server_cpu_s": round(server_cpu, 3),
            "requests_per_cpu_s": round(b.sent["sample"] / (client_cpu + server_cpu), 2),
            "tokens_per_cpu_s": round(n_tok / (client_cpu + server_cpu), 1),
            "loadavg_1min_after": round(os.getloadavg()[0], 2), "excluded": len(b.excluded)}


def audit_wall(target: str, out: Path, files: Path, base: str, ref: str, extra: list[str],
               server_pid: int | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process + the server's) of one `leakaudit audit`."""
    from leakaudit.cli import main

    cpu0 = time.process_time()
    srv0 = cpu_seconds(server_pid) if server_pid else 0.0
    start = time.perf_counter()
    code = main([str(a) for a in ["audit", "--target", target, "--candidates", files / "cands.jsonl",
                                  "--population", files / "pop.jsonl", "--base-model", base, "--references", ref,
                                  "--out", out, *extra]])
    if code != 0:
        raise SystemExit(f"audit of {target} exited {code}")
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0 + ((cpu_seconds(server_pid) - srv0) if server_pid else 0.0)
    return wall, cpu


def main() -> None:
    ap = benchlib.parser("api", __doc__)
    ap.add_argument("--model", default="tiny", help="tiny (2-layer random Llama) or smollm2-135m")
    ap.add_argument("--requests", type=int, default=32, help="prompts per throughput run")
    ap.add_argument("--n", type=int, default=2, help="trajectories per request")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--audit-candidates", type=int, default=12)
    ap.add_argument("--reps", type=int, default=3, help="repetitions per concurrency level (median reported)")
    ap.add_argument("--no-audit", action="store_true", help="throughput only (e.g. for smollm2-135m)")
    args = ap.parse_args()
    benchlib.apply_threads(args)
    load = benchlib.load_average()

    import pandas as pd

    from api_server import ServerProcess
    from leakaudit.models import load_tokenizer, make_tiny_llama
    from leakaudit.prompting import student_prompt_ids
    from leakaudit.signals.backend import SamplingConfig

    tmp = Path(tempfile.mkdtemp(prefix="bench_api_"))
    if args.model == "tiny":
        model = str(make_tiny_llama(tmp / "target", seed=0))
    else:
        model = args.model  # a model reference the server and tokenizer loader resolve
    ref = str(make_tiny_llama(tmp / "ref", seed=1)) if args.model == "tiny" else model
    tokenizer = load_tokenizer(model)
    prompts = [student_prompt_ids(tokenizer, r) for r in _records(args.requests)]
    cfg = SamplingConfig(n_per_record=args.n, max_new_tokens=args.max_new_tokens, seed=0)
    result = {"affinity": sorted(os.sched_getaffinity(0)), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "workload": {"requests": args.requests, "n_per_request": args.n, "max_new_tokens": args.max_new_tokens,
                           "mean_prompt_tokens": float(np.mean([len(p) for p in prompts]))},
              "note": ("one core shared by the test server and the client (and by whatever else runs on it: see "
                       "loadavg; *_per_cpu_s divide by the client's plus the server's CPU seconds, which other jobs "
                       "stretch much less than the wall clock); the server answers one request at a time (one "
                       "model lock), so concurrency overlaps only HTTP/JSON/parsing with compute")}
    with ServerProcess(model, name="bench") as srv:
        pid = srv.proc.pid
        throughput(srv.url, tokenizer, tmp / "warm", prompts[:2], cfg, 1, pid)  # warm-up (model caches, sessions)
        runs: dict[int, list[dict]] = {1: [], 4: [], 16: []}
        for rep in range(args.reps):  # interleaved (1, 4, 16, 1, 4, 16, ...) so drift hits every level alike
            for c in runs:
                runs[c].append(throughput(srv.url, tokenizer, tmp / f"c{c}_{rep}", prompts, cfg, c, pid))
        result["throughput"] = []
        for c, rows in runs.items():
            best = sorted(rows, key=lambda r: r["seconds"])[len(rows) // 2]  # the median repetition
            result["throughput"].append({**best, "reps": len(rows),
                                         "seconds_all": [r["seconds"] for r in rows],
                                         "requests_per_s_all": [r["requests_per_s"] for r in rows]})
        for row in result["throughput"]:
            print(f"concurrency {row['concurrency']:>2}: {row['requests_per_s']:6.2f} req/s, "
                  f"{row['tokens_per_s']:7.1f} tok/s ({row['requests']} requests, {row['seconds']} s); per CPU s: "
                  f"{row['requests_per_cpu_s']} req, {row['tokens_per_cpu_s']} tok")
        if args.no_audit:
            _write(args, result, tmp, load)
            return
        # the audit, API vs local, on the same records
        files = tmp / "audit"
        files.mkdir()
        recs = _records(args.audit_candidates + args.audit_candidates // 2)
        cands, pop = recs[:args.audit_candidates], recs[args.audit_candidates:]
        (files / "cands.jsonl").write_text("".join(
            json.dumps({**r.to_dict(), "meta": {"is_member": i % 2 == 0}}) + "\n" for i, r in enumerate(cands)))
        (files / "pop.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in pop))
        extra = ["--set", f"signals.sampling.n_per_record={args.n}",
                 "--set", f"signals.sampling.max_new_tokens={args.max_new_tokens}",
                 "--set", f"signals.sampling.batch_size={args.n}", "--set", "metrics.n_boot=100"]
        api_s, api_cpu = audit_wall(srv.url, tmp / "run_api", files, model, ref,
                                    [*extra, "--target-model", "bench", "--api-key-env", ""], server_pid=pid)
    local_s, local_cpu = audit_wall(model, tmp / "run_local", files, model, ref, extra)
    a = pd.read_csv(tmp / "run_api" / "candidates.csv")
    loc = pd.read_csv(tmp / "run_local" / "candidates.csv")
    cols = [c for c in a.columns if c in loc.columns and c not in ("record_id", "is_member")]
    diff = {c: float(np.nanmax(np.abs(a[c].to_numpy(float) - loc[c].to_numpy(float)))) for c in cols}
    api_info = json.loads((tmp / "run_api" / "audit.json").read_text())["api"]
    result["audit"] = {"candidates": len(cands), "population": len(pop), "api_seconds": round(api_s, 2),
                       "local_seconds": round(local_s, 2), "api_over_local": round(api_s / local_s, 3),
                       "api_cpu_seconds": round(api_cpu, 2), "local_cpu_seconds": round(local_cpu, 2),
                       "api_over_local_cpu": round(api_cpu / local_cpu, 3),
                       "max_abs_score_diff": diff, "api_requests": api_info["requests"],
                       "attacks_skipped": api_info["attacks"]["skipped"],
                       "note": ("wall time of the whole audit command (records, plan, teacher measurement, "
                                "signals, attacks, report); the API run's target compute happens in the server "
                                "process on the same core")}
    print(f"audit: API {api_s:.1f} s ({api_cpu:.1f} CPU s) vs local {local_s:.1f} s ({local_cpu:.1f} CPU s); "
          f"max |score diff| {max(diff.values()):.2e}")
    _write(args, result, tmp, load)


def _write(args, result: dict, tmp: Path, load: list[float]) -> None:
    benchlib.write_result(args.out, "api", params=vars(args), metrics=result, load_before=load)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
