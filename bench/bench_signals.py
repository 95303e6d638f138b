"""Signals throughput on smollm2-135m: batched backend (fp32, bf16 autocast) vs a naive per-record fp32 loop.

Measures
- bf16-autocast log-prob error against fp32 on the scoring workload (max / mean abs, also for mu and sigma);
- scoring tokens/s: 64 sequences = 32 chat prompts (~60 tokens) x 2 sampled continuations (<= 64 tokens);
- sampling tokens/s: 32 prompts x 1 trajectory x 64 new tokens (naive: model.generate one prompt at a time);
- the machine's fp32 / bf16 matmul peak (2048^2 matmuls) and the achieved fraction (~2 * params FLOPs/token).
Writes bench/results/signals.json and prints a table.  Run:  python bench/bench_signals.py [--threads 1]

Two more modes (issue 13, signals lever), each with its own JSON:
- --mode prefix: the default preset's signals shapes (humaneval student prompts, 4 trajectories of <= 64 tokens
  per record): sampling via model.generate vs the shared-prefill loop (HFOptions.share_prefill), and scoring of the
  trajectories per sequence vs from each prompt's KV cache (HFOptions.share_prefix), alternating in one run, with
  the paired ratio per repetition, the exactness of the shared path (max abs diffs, fp32) and the load average.
  -> bench/results/signals_prefix.json
- --mode bf16-body: per-token log-prob error against fp32 of autocast_bf16 on humaneval reference texts
  (score_fixed's workload). -> bench/results/signals_bf16_body.json (that file's run also measured a removed
  bf16_body option, final norm forced to fp32: identical to autocast_bf16, max diff 0.0)
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from leakaudit.data.records import Record
from leakaudit.io import write_json
from leakaudit.models import load_model, load_tokenizer
from leakaudit.prompting import student_prompt_ids
from leakaudit.signals import SamplingConfig
from leakaudit.signals.hf_backend import HFBackend, bf16_is_native

MODEL = "smollm2-135m"
TOPICS = ["the Pythagorean theorem", "photosynthesis", "binary search", "the French revolution", "insulin",
          "compound interest", "plate tectonics", "recursion", "the water cycle", "vaccines", "prime numbers",
          "supply and demand", "black holes", "hash tables", "the immune system", "derivatives"]


def make_prompts(tokenizer, n: int) -> list[list[int]]:
    """n chat prompts of roughly 45-75 tokens."""
    prompts = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        extra = " Use simple words, give one concrete example, and end with a one-line summary." * (1 + i % 3)
        text = f"Question {i}: explain {topic} to a first-year student in a short paragraph.{extra}"
        prompts.append(student_prompt_ids(tokenizer, Record("bench", text, "-")))
    return prompts


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    """Best-of-reps FLOP/s of an n x n matmul in `dtype` (bench_peak's measurement)."""
    from bench_peak import matmul_gflops

    return matmul_gflops(str(dtype).removeprefix("torch."), n, reps) * 1e9


def naive_score(model, prefixes, conts) -> list[np.ndarray]:
    """The per-record fp32 baseline: full logits, full log-softmax, one sequence at a time."""
    out = []
    with torch.no_grad():
        for p, c in zip(prefixes, conts):
            logits = model(torch.tensor([p + c])).logits[0]
            ls = torch.log_softmax(logits.float(), dim=-1)
            idx = torch.arange(len(p) - 1, len(p) + len(c) - 1)
            out.append(ls[idx, torch.tensor(c)].numpy())
    return out


def naive_sample(model, prompts, cfg: SamplingConfig, eos: int) -> list[list[int]]:
    out = []
    torch.manual_seed(cfg.seed)
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 temperature=cfg.temperature, top_p=cfg.top_p, top_k=None,
                                 max_new_tokens=cfg.max_new_tokens, pad_token_id=eos, eos_token_id=eos)
            row = gen[0, len(p):].tolist()
            out.append(row[: row.index(eos) + 1] if eos in row else row)
    return out


def humaneval_prompts(tok, n: int, target_tokens: int):
    """n humaneval records and their student prompt ids: the n whose prompts are closest to target_tokens
    (0: the first n). Returns (records, prompts)."""
    from leakaudit.data.sources import load_source

    records = load_source("humaneval")
    prompts = [student_prompt_ids(tok, r) for r in records]
    order = list(range(len(records)))
    if target_tokens > 0:
        order.sort(key=lambda i: (abs(len(prompts[i]) - target_tokens), i))
    order = sorted(order[:n])
    return [records[i] for i in order], [prompts[i] for i in order]


def max_abs(a, b, field: str) -> float:
    return float(max(np.abs(getattr(x, field) - getattr(y, field)).max() for x, y in zip(a, b) if len(x.logp)))


def _env(threads: int, **extra) -> dict:
    try:
        git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        git = ""
    return {"model": MODEL, "torch": torch.__version__, "threads": threads, "git": git,
            "cpu": platform.processor() or platform.machine(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "cpu_count": os.cpu_count(), **extra}


def prefix_main(args) -> None:
    """Prefix-shared sampling and scoring vs the current paths, alternating, on smollm2-135m."""
    load_start = os.getloadavg()
    tok = load_tokenizer(MODEL)
    model = load_model(MODEL)
    records, prompts = humaneval_prompts(tok, args.records, args.prompt_tokens)
    base = {"device": "cpu", "autocast_bf16": False, "score_batch_size": 16, "max_batch_tokens": 4096}
    variants = {"plain": HFBackend.from_model(model, **base),
                "shared": HFBackend.from_model(model, **base, share_prefix=True, share_prefill=True)}
    if args.with_bf16_body:
        variants["shared_bf16"] = HFBackend.from_model(model, **base, share_prefix=True, share_prefill=True,
                                                            autocast_bf16=True)
    cfg = SamplingConfig(n_per_record=args.n_per_record, temperature=1.0, top_p=1.0,
                         max_new_tokens=args.new_tokens, seed=0, batch_size=16)
    names = list(variants)
    out: dict = {"sampling": {"reps": []}, "scoring": {"reps": []}, "exactness_fp32": {}}

    # -- sampling: generate vs shared prefill (the sampler's default precision: bf16 where native)
    samples = {}
    for rep in range(args.sample_reps):
        row = {"loadavg": os.getloadavg()}
        for name in (["plain", "shared"] if rep % 2 == 0 else ["shared", "plain"]):
            trajs, t = timed(lambda: variants[name].sample(prompts, cfg))
            samples[name] = trajs
            row[name] = {"seconds": t, "tokens": sum(len(x) for per in trajs for x in per)}
            row[name]["tokens_per_s"] = row[name]["tokens"] / t
        row["ratio_shared_vs_plain"] = row["shared"]["tokens_per_s"] / row["plain"]["tokens_per_s"]
        out["sampling"]["reps"].append(row)
        print("sampling", rep, {k: round(v["tokens_per_s"], 1) for k, v in row.items() if isinstance(v, dict)},
              f"ratio {row['ratio_shared_vs_plain']:.2f} load {row['loadavg'][0]:.2f}", flush=True)
    pairs = [(a, b) for pa, pb in zip(samples["plain"], samples["shared"]) for a, b in zip(pa, pb)]
    out["sampling"]["bf16"] = variants["plain"].sample_bf16
    out["sampling"]["identical_trajectories"] = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"

    # -- scoring the plain path's trajectories (score_fresh: prefix = the record's prompt, no vocab stats)
    prefixes = [prompts[i] for i, per in enumerate(samples["plain"]) for _ in per]
    conts = [t for per in samples["plain"] for t in per]
    n_scored = sum(len(c) for c in conts)
    for rep in range(args.score_reps):
        row = {"loadavg": os.getloadavg()}
        for name in (names if rep % 2 == 0 else names[::-1]):
            _, t = timed(lambda: variants[name].score(prefixes, conts))
            row[name] = {"seconds": t, "tokens_per_s": n_scored / t}
        for name in names[1:]:
            row[f"ratio_{name}_vs_plain"] = row["plain"]["seconds"] / row[name]["seconds"]
        out["scoring"]["reps"].append(row)
        print("scoring", rep, {k: round(v["tokens_per_s"], 1) for k, v in row.items() if isinstance(v, dict)},
              {k: round(v, 2) for k, v in row.items() if k.startswith("ratio")}, f"load {row['loadavg'][0]:.2f}",
              flush=True)
    # one vocab_stats pass each (score_fixed's statistics) for exactness, and the bf16-body error on this workload
    stats = {}
    for name in names:
        stats[name], t = timed(lambda: variants[name].score(prefixes, conts, vocab_stats=True))
        out["scoring"][f"{name}_vocab_stats_seconds"] = t
    out["exactness_fp32"] = {f: max_abs(stats["plain"], stats["shared"], f) for f in ("logp", "mu", "sigma")}
    # the float-noise floor of the plain path itself: the same sequences one per forward vs batched
    single = HFBackend.from_model(model, **{**base, "score_batch_size": 1}).score(prefixes, conts, vocab_stats=True)
    out["exactness_fp32"]["noise_floor_plain_batched_vs_one_by_one"] = {
        f: max_abs(stats["plain"], single, f) for f in ("logp", "mu", "sigma")}
    out["exactness_fp32"]["shared_vs_plain_one_by_one"] = {
        f: max_abs(stats["shared"], single, f) for f in ("logp", "mu", "sigma")}
    # fp32 sampling, generate vs shared prefill, on the first records: identical trajectories expected
    fp32_cfg = SamplingConfig(**{**cfg.to_dict(), "batch_size": 16})
    few = prompts[: args.fp32_sample_records]
    a = HFBackend.from_model(model, **base, sample_autocast_bf16=False).sample(few, fp32_cfg)
    b = HFBackend.from_model(model, **base, sample_autocast_bf16=False, share_prefill=True).sample(few, fp32_cfg)
    pairs32 = [(x, y) for px, py in zip(a, b) for x, y in zip(px, py)]
    out["sampling"]["fp32_identical_trajectories"] = f"{sum(x == y for x, y in pairs32)}/{len(pairs32)}"
    if "shared_bf16" in stats:
        d = np.concatenate([x.logp - y.logp for x, y in zip(stats["plain"], stats["shared_bf16"])])
        out["shared_bf16_vs_fp32"] = {"logp_mean_abs": float(np.abs(d).mean()),
                                           "logp_max_abs": float(np.abs(d).max()),
                                           "mu_max_abs": max_abs(stats["plain"], stats["shared_bf16"], "mu")}

    for section, keys in (("sampling", ["ratio_shared_vs_plain"]),
                          ("scoring", [f"ratio_{n}_vs_plain" for n in names[1:]])):
        reps = out[section]["reps"]
        for k in keys:
            out[section][f"median_{k}"] = float(np.median([r[k] for r in reps]))
        for n in (["plain", "shared"] if section == "sampling" else names):
            out[section][f"median_tokens_per_s_{n}"] = float(np.median([r[n]["tokens_per_s"] for r in reps]))
    load_end = os.getloadavg()
    loaded = max(load_start[0], load_end[0]) > 1.5 or time.strftime("%H:%M") < args.quiet_after
    out["env"] = _env(torch.get_num_threads(), loadavg_start=load_start, loadavg_end=load_end,
                      measured_on_loaded_machine=bool(loaded), records=[r.record_id for r in records],
                      prompt_tokens=[len(p) for p in prompts], n_per_record=cfg.n_per_record,
                      max_new_tokens=cfg.max_new_tokens, scored_tokens=n_scored,
                      forward_tokens_plain=sum(len(p) + len(c) for p, c in zip(prefixes, conts)),
                      forward_tokens_shared=sum(len(p) for p in prompts) + sum(len(c) - 1 for c in conts))
    write_json(args.out or str(Path(__file__).parent / "results" / "signals_prefix.json"), out)
    print("exactness (fp32, max abs):", out["exactness_fp32"])
    print("medians:", {k: round(v, 3) for sec in ("sampling", "scoring") for k, v in out[sec].items()
                       if k.startswith("median")})


def bf16_body_main(args) -> None:
    """Per-token log-prob error of autocast_bf16 against fp32 on humaneval reference texts."""
    from leakaudit.prompting import reference_text_ids

    load_start = os.getloadavg()
    tok = load_tokenizer(MODEL)
    model = load_model(MODEL)
    records, prompts = humaneval_prompts(tok, args.records, 0)
    conts = [reference_text_ids(tok, r) for r in records]
    base = {"device": "cpu", "score_batch_size": 16, "max_batch_tokens": 4096}
    variants = {"fp32": HFBackend.from_model(model, **base, autocast_bf16=False),
                "autocast_bf16": HFBackend.from_model(model, **base, autocast_bf16=True)}
    scores, seconds = {}, {}
    for name, backend in variants.items():
        scores[name], seconds[name] = timed(lambda: backend.score(prompts, conts, vocab_stats=True))
    out: dict = {"seconds": seconds}
    ref = scores["fp32"]
    for name in ("autocast_bf16",):
        d = np.concatenate([x.logp - y.logp for x, y in zip(ref, scores[name])])
        out[f"{name}_vs_fp32"] = {
            "logp_mean_abs": float(np.abs(d).mean()), "logp_max_abs": float(np.abs(d).max()),
            "logp_p99_abs": float(np.quantile(np.abs(d), 0.99)),
            "mu_max_abs": max_abs(ref, scores[name], "mu"), "sigma_max_abs": max_abs(ref, scores[name], "sigma"),
            "mean_logp_per_seq_max_abs": float(max(abs(x.logp.mean() - y.logp.mean())
                                                   for x, y in zip(ref, scores[name]))),
            "speed_vs_fp32": seconds["fp32"] / seconds[name]}
    out["env"] = _env(torch.get_num_threads(), loadavg_start=load_start, loadavg_end=os.getloadavg(),
                      records=[r.record_id for r in records], prompt_tokens=[len(p) for p in prompts],
                      scored_tokens=sum(len(c) for c in conts), bf16_native=bf16_is_native(torch.device("cpu")))
    write_json(args.out or str(Path(__file__).parent / "results" / "signals_bf16_body.json"), out)
    print({k: v for k, v in out.items() if k != "env"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mode", choices=["baseline", "prefix", "bf16-body"], default="baseline")
    ap.add_argument("--records", type=int, default=8, help="prefix / bf16-body modes: humaneval records")
    ap.add_argument("--prompt-tokens", type=int, default=140,
                    help="prefix mode: take the records whose student prompts are closest to this length (0: first)")
    ap.add_argument("--n-per-record", type=int, default=4, help="prefix mode: trajectories per record")
    ap.add_argument("--sample-reps", type=int, default=2, help="prefix mode: alternating sampling repetitions")
    ap.add_argument("--score-reps", type=int, default=4, help="prefix mode: alternating scoring repetitions")
    ap.add_argument("--fp32-sample-records", type=int, default=2,
                    help="prefix mode: records sampled in fp32 by both paths to compare their trajectories")
    ap.add_argument("--with-bf16-body", action=argparse.BooleanOptionalAction, default=True,
                    help="prefix mode: also time share_prefix under bf16 autocast")
    ap.add_argument("--quiet-after", default="15:45", help="HH:MM before which the machine counts as loaded")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--naive-sample", type=int, default=8, help="prompts in the naive sampling loop (extrapolated)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads; 1 by default because on an oversubscribed shared CPU two "
                         "threads make small matmuls ~50x slower (OpenMP barriers wait on descheduled threads)")
    ap.add_argument("--out", default=None, help="JSON path (default: bench/results/<mode's file>)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.mode == "prefix":
        return prefix_main(args)
    if args.mode == "bf16-body":
        return bf16_body_main(args)
    args.out = args.out or str(Path(__file__).parent / "results" / "signals.json")
    threads = torch.get_num_threads()
    load_before = os.getloadavg()
    tok = load_tokenizer(MODEL)
    model = load_model(MODEL)
    n_params = sum(p.numel() for p in model.parameters())
    eos = tok.eos_token_id
    batching = {"score_batch_size": 16, "max_batch_tokens": 4096}
    fp32 = HFBackend.from_model(model, autocast_bf16=False, sample_autocast_bf16=False, **batching)
    bf16 = HFBackend.from_model(model, autocast_bf16=True, sample_autocast_bf16=True, **batching)

    prompts = make_prompts(tok, args.prompts)
    cfg = SamplingConfig(n_per_record=1, temperature=1.0, top_p=0.95, max_new_tokens=args.new_tokens, seed=0,
                         batch_size=args.prompts)
    results: dict = {"sampling": {}, "scoring": {}}

    # -- sampling
    s32, t = timed(lambda: fp32.sample(prompts, cfg))
    n_tok = sum(len(t_) for per in s32 for t_ in per)
    results["sampling"]["batched_fp32"] = {"tokens": n_tok, "seconds": t, "tokens_per_s": n_tok / t}
    s16, t = timed(lambda: bf16.sample(prompts, cfg))
    n_tok = sum(len(t_) for per in s16 for t_ in per)
    results["sampling"]["batched_bf16"] = {"tokens": n_tok, "seconds": t, "tokens_per_s": n_tok / t}
    sn, t = timed(lambda: naive_sample(model, prompts[: args.naive_sample], cfg, eos))
    n_tok = sum(len(x) for x in sn)
    results["sampling"]["naive_fp32"] = {"tokens": n_tok, "seconds": t, "tokens_per_s": n_tok / t,
                                         "prompts": args.naive_sample}

    # -- scoring: 2 continuations per prompt (the fp32 and the bf16 sample)
    prefixes = prompts + prompts
    conts = [per[0] for per in s32] + [per[0] for per in s16]
    n_scored = sum(len(c) for c in conts)
    n_forward = sum(len(p) + len(c) for p, c in zip(prefixes, conts))
    a, t = timed(lambda: fp32.score(prefixes, conts, vocab_stats=True))
    results["scoring"]["batched_fp32"] = {"seconds": t}
    b, t = timed(lambda: bf16.score(prefixes, conts, vocab_stats=True))
    results["scoring"]["batched_bf16"] = {"seconds": t}
    _, t = timed(lambda: bf16.score(prefixes, conts, vocab_stats=False))
    results["scoring"]["batched_bf16_no_stats"] = {"seconds": t}
    _, t = timed(lambda: fp32.score(prefixes, conts, vocab_stats=False))
    results["scoring"]["batched_fp32_no_stats"] = {"seconds": t}
    naive, t = timed(lambda: naive_score(model, prefixes, conts))
    results["scoring"]["naive_fp32"] = {"seconds": t}
    for row in results["scoring"].values():
        row.update(scored_tokens=n_scored, forward_tokens=n_forward, tokens_per_s=n_scored / row["seconds"],
                   forward_tokens_per_s=n_forward / row["seconds"])

    diff = np.concatenate([x.logp - y.logp for x, y in zip(a, b)])
    naive_diff = np.concatenate([x.logp - y for x, y in zip(a, naive)])
    results["bf16_vs_fp32"] = {
        "logp_max_abs": float(np.abs(diff).max()), "logp_mean_abs": float(np.abs(diff).mean()),
        "mu_max_abs": float(max(np.abs(x.mu - y.mu).max() for x, y in zip(a, b))),
        "sigma_max_abs": float(max(np.abs(x.sigma - y.sigma).max() for x, y in zip(a, b))),
        "mean_logp_per_seq_max_abs": float(max(abs(x.logp.mean() - y.logp.mean()) for x, y in zip(a, b))),
        "batched_fp32_vs_naive_max_abs": float(np.abs(naive_diff).max()),
    }

    # -- matmul peak and achieved fraction (2 * params FLOPs per forward token; attention ignored)
    peak32, peak16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
    results["peak_flops"] = {"fp32": peak32, "bf16": peak16}
    for section in ("scoring", "sampling"):
        for name, row in results[section].items():
            toks = row.get("forward_tokens_per_s", row["tokens_per_s"])
            flops = 2 * n_params * toks
            row["achieved_flops"] = flops
            row["fraction_of_peak"] = flops / (peak16 if "bf16" in name else peak32)
    sc, sa = results["scoring"], results["sampling"]
    results["speedup"] = {
        "scoring_fp32_vs_naive": sc["naive_fp32"]["seconds"] / sc["batched_fp32_no_stats"]["seconds"],
        "scoring_bf16_vs_naive": sc["naive_fp32"]["seconds"] / sc["batched_bf16_no_stats"]["seconds"],
        "sampling_fp32_vs_naive": sa["batched_fp32"]["tokens_per_s"] / sa["naive_fp32"]["tokens_per_s"],
        "sampling_bf16_vs_naive": sa["batched_bf16"]["tokens_per_s"] / sa["naive_fp32"]["tokens_per_s"],
    }
    try:
        git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        git = ""
    results["env"] = {"model": MODEL, "params": n_params, "torch": torch.__version__, "threads": threads,
                      "cpu": platform.processor() or platform.machine(), "loadavg_before": load_before,
                      "loadavg_after": os.getloadavg(), "git": git, "prompts": args.prompts,
                      "new_tokens": args.new_tokens, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json(args.out, results)

    print(f"smollm2-135m, {threads} threads, load {load_before[0]:.1f}")
    print(f"{'workload':32s} {'tok/s':>9s} {'fwd tok/s':>10s} {'GFLOP/s':>8s} {'of peak':>8s}")
    for section in ("scoring", "sampling"):
        for name, row in results[section].items():
            print(f"{section + ' ' + name:32s} {row['tokens_per_s']:9.1f} "
                  f"{row.get('forward_tokens_per_s', row['tokens_per_s']):10.1f} "
                  f"{row['achieved_flops'] / 1e9:8.1f} {row['fraction_of_peak']:8.1%}")
    print(f"matmul peak: fp32 {peak32 / 1e9:.1f} GFLOP/s, bf16 {peak16 / 1e9:.1f} GFLOP/s")
    print("bf16 vs fp32:", {k: round(v, 5) for k, v in results["bf16_vs_fp32"].items()})
    print("speedups:", {k: round(v, 2) for k, v in results["speedup"].items()})


if __name__ == "__main__":
    main()
