"""Signals throughput on smollm2-135m: batched backend (fp32, bf16 autocast) vs a naive per-record fp32 loop.

Measures
- bf16-autocast log-prob error against fp32 on the scoring workload (max / mean abs, also for mu and sigma);
- scoring tokens/s: 64 sequences = 32 chat prompts (~60 tokens) x 2 sampled continuations (<= 64 tokens);
- sampling tokens/s: 32 prompts x 1 trajectory x 64 new tokens (naive: model.generate one prompt at a time);
- the machine's fp32 / bf16 matmul peak (2048^2 matmuls) and the achieved fraction (~2 * params FLOPs/token).
Writes bench/results/signals.json and prints a table.  Run:  python bench/bench_signals.py [--threads 1]
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
from leakaudit.signals.hf_backend import HFBackend

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
    """Best-of-reps FLOP/s of an n x n matmul in `dtype`."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--naive-sample", type=int, default=8, help="prompts in the naive sampling loop (extrapolated)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads; 1 by default because on an oversubscribed shared CPU two "
                         "threads make small matmuls ~50x slower (OpenMP barriers wait on descheduled threads)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "signals.json"))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
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
