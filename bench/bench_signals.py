"""Signals throughput on smollm2-135m: batched backend (fp32, bf16 autocast) vs a naive per-record fp32 loop.

Measures
- bf16-autocast log-prob error against fp32 on the scoring workload (max / mean abs, also for mu and sigma);
- scoring tokens/s: 64 sequences = 32 chat prompts (~60 tokens) x 2 sampled continuations (<= 64 tokens);
- sampling tokens/s: 32 prompts x 1 trajectory x 64 new tokens (naive: model.generate one prompt at a time);
- the machine's fp32 / bf16 matmul peak (2048^2 matmuls) and the achieved fraction (~2 * params FLOPs/token).
Writes bench/results/signals.json and prints a table.  Run:  python bench/bench_signals.py [--threads 1]

Three more modes (the signals speed levers), each with its own result file; every file is bench/benchlib.py's
schema, named signals or signals_<mode>:
- --mode prefix: the default preset's signals shapes (humaneval student prompts, 4 trajectories of <= 64 tokens
  per record): sampling via model.generate vs the shared-prefill loop (HFOptions.share_prefill), and scoring of the
  trajectories per sequence vs from each prompt's KV cache (HFOptions.share_prefix), alternating in one run, with
  the paired ratio per repetition, the exactness of the shared path (max abs diffs, fp32) and the load average.
  -> bench/results/signals_prefix.json
- --mode bf16-body: per-token log-prob error against fp32 of autocast_bf16 on humaneval reference texts
  (score_fixed's workload). -> bench/results/signals_bf16_body.json (that file's run also measured a removed
  bf16_body option, final norm forced to fp32: identical to autocast_bf16, max diff 0.0)
- --mode stage: the signals stage's defaults before and after the speed levers, side by side in ABBA order on the
  prefix mode's shapes: sampling under bf16 autocast over the float32 weights (the old path, AutocastSampling
  below) vs from a bf16 copy of the weights (HFOptions.sample_bf16, the new path), and scoring the sampled
  trajectories with share_prefix off vs on (fp32); tokens/s per wall second and per CPU second (a core shared
  with other jobs slows the wall clock, much less the CPU clock) and achieved FLOP/s as a fraction of the fp32
  / bf16 matmul peak measured before every repetition (bench_peak.matmul_gflops, 2048^2, and the same timed by
  the CPU clock), with FLOPs = 2 x non-embedding params per forward token + 2 x V x H per output-head row;
  also how far each sampling precision moves the next-token distribution from fp32 (|d log p|, KL).
  -> bench/results/signals_stage.json.  Run (1 thread):
  taskset -c 1 env OMP_NUM_THREADS=1 python bench/bench_signals.py --mode stage --sample-reps 4 --score-reps 4
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

import benchlib

from leakaudit.data.records import Record
from leakaudit.models import load_model, load_tokenizer
from leakaudit.prompting import student_prompt_ids
from leakaudit.signals import SamplingConfig
from leakaudit.precision import bf16_is_native
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
    """What a mode ran on beyond the machine record: the model, the thread count and the workload's shapes."""
    return {"model": MODEL, "threads": threads, **extra}


def _write(args, mode: str, out: dict, load_before: list[float]) -> None:
    """A mode's result file: bench/results/signals_<mode>.json unless --out."""
    name = f"signals_{mode.replace('-', '_')}"
    benchlib.write_result(args.out or benchlib.RESULTS / f"{name}.json", name, params=vars(args), metrics=out,
                          load_before=load_before)


def prefix_main(args) -> None:
    """Prefix-shared sampling and scoring vs the current paths, alternating, on smollm2-135m."""
    load_start = benchlib.load_average()
    tok = load_tokenizer(MODEL)
    model = load_model(MODEL)
    records, prompts = humaneval_prompts(tok, args.records, args.prompt_tokens)
    base = {"device": "cpu", "autocast_bf16": False, "score_batch_size": 16, "max_batch_tokens": 4096}
    variants = {"plain": HFBackend.from_model(model, **base, share_prefix=False),
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
    single = HFBackend.from_model(model, **{**base, "score_batch_size": 1}, share_prefix=False).score(
        prefixes, conts, vocab_stats=True)
    out["exactness_fp32"]["noise_floor_plain_batched_vs_one_by_one"] = {
        f: max_abs(stats["plain"], single, f) for f in ("logp", "mu", "sigma")}
    out["exactness_fp32"]["shared_vs_plain_one_by_one"] = {
        f: max_abs(stats["shared"], single, f) for f in ("logp", "mu", "sigma")}
    # fp32 sampling, generate vs shared prefill, on the first records: identical trajectories expected
    fp32_cfg = SamplingConfig(**{**cfg.to_dict(), "batch_size": 16})
    few = prompts[: args.fp32_sample_records]
    a = HFBackend.from_model(model, **base, sample_bf16=False).sample(few, fp32_cfg)
    b = HFBackend.from_model(model, **base, sample_bf16=False, share_prefill=True).sample(few, fp32_cfg)
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
    _write(args, "prefix", out, load_start)
    print("exactness (fp32, max abs):", out["exactness_fp32"])
    print("medians:", {k: round(v, 3) for sec in ("sampling", "scoring") for k, v in out[sec].items()
                       if k.startswith("median")})


class AutocastSampling(HFBackend):
    """The sampling path before the bf16 copy: model.generate on the float32 weights under bf16 autocast (every
    linear layer re-casts its float32 weight to bf16 at every decode step). Scoring is HFBackend's."""

    def _sampling_model(self):
        return self.model, self.sample_bf16


def sampling_flops(prompts, trajs, n_body: int, head: int) -> float:
    """Useful FLOPs of sampling trajs [P][n] from prompts [P] on the model.generate path (each trajectory
    prefills its prompt): a forward token costs 2 * n_body, an output-head row 2 * head (V x H); the first
    token comes from the prefill's last position, each later one from one decode step. Padding, finished rows
    still decoded, and attention's own FLOPs (~6% at these ~200-token contexts) are not counted."""
    total = 0.0
    for p, per in zip(prompts, trajs):
        for t in per:
            total += 2 * n_body * (len(p) + max(len(t) - 1, 0)) + 2 * head * len(t)
    return total


def scoring_flops(prefixes, conts, n_body: int, head: int, shared: bool) -> float:
    """FLOPs the scoring path executes (padding and attention not counted): plain runs prefix + continuation
    per sequence; shared runs each repeated prefix once and each continuation minus its last token on its
    cache. The head runs once per scored token either way."""
    if shared:
        groups = {}
        for p, c in zip(prefixes, conts):
            groups.setdefault(tuple(p), []).append(c)
        fwd = sum(len(p) + sum(len(c) - 1 for c in cs) if len(cs) > 1 else sum(len(p) + len(c) for c in cs)
                  for p, cs in groups.items())
    else:
        fwd = sum(len(p) + len(c) for p, c in zip(prefixes, conts))
    return 2 * n_body * fwd + 2 * head * sum(len(c) for c in conts)


def sampling_precision_error(model, copy_model, prefixes, conts) -> dict:
    """How far the distributions the sampler draws from are from the float32 model's, teacher-forced on
    prefix + continuation: per scored position, |log p(token)| difference and KL(p_fp32 || p_variant), for
    bf16 autocast over the float32 weights and for the bf16 copy."""
    rows = {"autocast": [], "bf16_copy": []}
    with torch.inference_mode():
        for p, c in zip(prefixes, conts):
            ids = torch.tensor([p + c])
            idx = torch.arange(len(p) - 1, len(p) + len(c) - 1)
            tgt = torch.tensor(c)
            ref = model(ids).logits[0, idx].float().log_softmax(-1)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                ac = model(ids).logits[0, idx].float().log_softmax(-1)
            cp = copy_model(ids).logits[0, idx].float().log_softmax(-1)
            for name, lp in (("autocast", ac), ("bf16_copy", cp)):
                dl = (lp - ref)[torch.arange(len(c)), tgt].abs()
                kl = (ref.exp() * (ref - lp)).sum(-1)
                rows[name].append((dl, kl))
    out = {}
    for name, parts in rows.items():
        dl = torch.cat([d for d, _ in parts])
        kl = torch.cat([k for _, k in parts])
        out[name] = {"logp_mean_abs": float(dl.mean()), "logp_max_abs": float(dl.max()),
                     "kl_mean": float(kl.mean()), "kl_max": float(kl.max()), "positions": int(dl.numel())}
    return out


def abba(names: list[str], rep: int) -> list[str]:
    """A B, B A, A B, ...: the order of `names` in repetition `rep`."""
    return names if rep % 2 == 0 else names[::-1]


def matmul_gflops_cpu(dtype: str, n: int = 2048, reps: int = 3) -> float:
    """bench_peak.matmul_gflops timed by this process's CPU clock instead of the wall clock: the core's peak
    while this job runs, whoever else shares the core (the yardstick for GFLOP per CPU second)."""
    from bench_peak import matmul_gflops

    return matmul_gflops(dtype, n, reps, clock=time.process_time)


def timed_cpu(fn):
    """(fn(), wall seconds, this process's CPU seconds): with one thread and other jobs on the same core, CPU
    time is the less disturbed measure (it excludes the time the job waited for the core)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def stage_main(args) -> None:
    """The signals stage's two costs on the default preset's shapes, old defaults vs new, side by side (ABBA):
    sampling (bf16 autocast over float32 weights vs a bf16 copy) and scoring the trajectories (share_prefix off
    vs on), tokens/s (per wall and per CPU second) and the fraction of the matmul peak measured in this run
    (before every repetition, so a busy core lowers both)."""
    from bench_peak import matmul_gflops

    def peak_now() -> dict:
        return {dt: matmul_gflops(dt, 2048, 3) for dt in ("float32", "bfloat16")}

    def peak_cpu_now() -> dict:
        return {dt: matmul_gflops_cpu(dt, 2048, 3) for dt in ("float32", "bfloat16")}

    load_start = benchlib.load_average()
    tok = load_tokenizer(MODEL)
    model = load_model(MODEL)
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    n_params = sum(p.numel() for p in model.parameters())
    n_body = n_params - emb.numel() - (0 if head is emb else head.numel())
    n_head = head.numel()
    records, prompts = humaneval_prompts(tok, args.records, args.prompt_tokens)
    cfg = SamplingConfig(n_per_record=args.n_per_record, temperature=1.0, top_p=1.0,
                         max_new_tokens=args.new_tokens, seed=0, batch_size=16)
    base = {"device": "cpu", "autocast_bf16": False, "score_batch_size": 16, "max_batch_tokens": 4096}
    samplers = {"autocast": AutocastSampling.from_model(model, **base, sample_bf16=True),
                "bf16_copy": HFBackend.from_model(model, **base, sample_bf16=True)}
    _, copy_seconds, _ = timed_cpu(lambda: samplers["bf16_copy"]._sampling_model())
    copy_model = samplers["bf16_copy"]._bf16_model
    copy_bytes = sum(p.numel() * p.element_size() for p in copy_model.parameters())
    warm = SamplingConfig(**{**cfg.to_dict(), "max_new_tokens": 4})
    for b in samplers.values():
        b.sample(prompts[:2], warm)
    out: dict = {"sampling": {"reps": []}, "scoring": {"reps": []}}
    peaks_seen: list[dict] = []

    def run_reps(section: str, variants: dict, reps: int, work, flops_of, ratio_key: str, dtype: str) -> dict:
        results: dict = {n: [] for n in variants}
        new, old = list(variants)[1], list(variants)[0]
        for rep in range(reps):
            peak, peak_cpu = peak_now(), peak_cpu_now()
            peaks_seen.append({"wall": peak, "cpu": peak_cpu})
            row = {"loadavg": os.getloadavg(), "peak_gflops": peak, "peak_gflops_cpu": peak_cpu}
            for name in abba(list(variants), rep):
                res, wall, cpu = timed_cpu(lambda: work(variants[name]))
                results[name].append(res)
                n_tok, flops = flops_of(name, res)
                row[name] = {"seconds": wall, "cpu_seconds": cpu, "tokens": n_tok, "tokens_per_s": n_tok / wall,
                             "tokens_per_cpu_s": n_tok / cpu, "gflops_per_s": flops / wall / 1e9,
                             "gflops_per_cpu_s": flops / cpu / 1e9,
                             "fraction_of_peak": flops / wall / 1e9 / peak[dtype],
                             "fraction_of_peak_cpu": flops / cpu / 1e9 / peak_cpu[dtype]}
            row[ratio_key] = row[new]["tokens_per_s"] / row[old]["tokens_per_s"]
            row[ratio_key + "_cpu"] = row[new]["tokens_per_cpu_s"] / row[old]["tokens_per_cpu_s"]
            out[section]["reps"].append(row)
            print(section, rep, {k: (round(v["tokens_per_s"], 1), round(v["tokens_per_cpu_s"], 1))
                                 for k, v in row.items() if isinstance(v, dict) and "tokens" in v},
                  f"ratio {row[ratio_key]:.2f} (cpu {row[ratio_key + '_cpu']:.2f}) load {row['loadavg'][0]:.2f} "
                  f"peak {peak['float32']:.0f}/{peak['bfloat16']:.0f} (cpu {peak_cpu['float32']:.0f}/"
                  f"{peak_cpu['bfloat16']:.0f})", flush=True)
        return results

    trajs = run_reps("sampling", samplers, args.sample_reps, lambda b: b.sample(prompts, cfg),
                     lambda name, t: (sum(len(x) for per in t for x in per),
                                      sampling_flops(prompts, t, n_body, n_head)),
                     "ratio_bf16_copy_vs_autocast", "bfloat16")
    out["sampling"]["reproducible_across_reps"] = {n: all(r == v[0] for r in v) for n, v in trajs.items()}
    pairs = [(a, b) for pa, pb in zip(trajs["autocast"][0], trajs["bf16_copy"][0]) for a, b in zip(pa, pb)]
    out["sampling"]["identical_trajectories_copy_vs_autocast"] = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"

    scorers = {"plain": HFBackend.from_model(model, **base, share_prefix=False),
               "shared": HFBackend.from_model(model, **base, share_prefix=True)}
    sampled = trajs["bf16_copy"][0]
    prefixes = [prompts[i] for i, per in enumerate(sampled) for _ in per]
    conts = [t for per in sampled for t in per]
    n_scored = sum(len(c) for c in conts)
    for b in scorers.values():
        b.score(prefixes[:2], conts[:2])
    scores = run_reps("scoring", scorers, args.score_reps, lambda b: b.score(prefixes, conts),
                      lambda name, _: (n_scored, scoring_flops(prefixes, conts, n_body, n_head, name == "shared")),
                      "ratio_shared_vs_plain", "float32")
    d = np.concatenate([x.logp - y.logp for x, y in zip(scores["plain"][0], scores["shared"][0])])
    out["scoring"]["shared_vs_plain_logp_max_abs"] = float(np.abs(d).max())
    out["scoring"]["shared_vs_plain_logp_mean_abs"] = float(np.abs(d).mean())
    best = {clock: {dt: max(p[clock][dt] for p in peaks_seen) for dt in ("float32", "bfloat16")}
            for clock in ("wall", "cpu")}
    out["sampling_precision_vs_fp32"] = sampling_precision_error(model, copy_model, prefixes[::args.n_per_record],
                                                                 conts[::args.n_per_record])

    for section, names, dt in (("sampling", list(samplers), "bfloat16"), ("scoring", list(scorers), "float32")):
        sec = out[section]
        for name in names:
            med = {k: float(np.median([r[name][k] for r in sec["reps"]]))
                   for k in ("tokens_per_s", "tokens_per_cpu_s", "gflops_per_s", "gflops_per_cpu_s",
                             "fraction_of_peak", "fraction_of_peak_cpu", "seconds", "cpu_seconds")}
            sec[name] = {f"median_{k}": v for k, v in med.items()}
            sec[name]["peak_dtype"] = dt
        for key in [k for k in sec["reps"][0] if k.startswith("ratio")]:
            vals = [r[key] for r in sec["reps"]]
            sec[f"median_{key}"], sec[f"min_{key}"], sec[f"max_{key}"] = (float(np.median(vals)), float(min(vals)),
                                                                           float(max(vals)))

    def defaults(smp: str, sco: str) -> dict:
        a, b = out["sampling"][smp], out["scoring"][sco]
        return {"sampling_tokens_per_s": a["median_tokens_per_s"],
                "sampling_tokens_per_cpu_s": a["median_tokens_per_cpu_s"],
                "sampling_fraction_of_bf16_peak": a["median_fraction_of_peak"],
                "sampling_fraction_of_bf16_peak_cpu": a["median_fraction_of_peak_cpu"],
                "scoring_tokens_per_s": b["median_tokens_per_s"],
                "scoring_tokens_per_cpu_s": b["median_tokens_per_cpu_s"],
                "scoring_fraction_of_fp32_peak": b["median_fraction_of_peak"],
                "scoring_fraction_of_fp32_peak_cpu": b["median_fraction_of_peak_cpu"],
                "sample_plus_score_fresh_cpu_seconds": a["median_cpu_seconds"] + b["median_cpu_seconds"]}

    old, new = defaults("autocast", "plain"), defaults("bf16_copy", "shared")
    out["defaults"] = {
        "old": {"sampling": "bf16 autocast over float32 weights", "share_prefix": False, **old},
        "new": {"sampling": "bf16 copy of the weights", "share_prefix": True, **new},
        "speedup_sample_plus_score_fresh_cpu": old["sample_plus_score_fresh_cpu_seconds"]
        / new["sample_plus_score_fresh_cpu_seconds"],
        "note": "score_fixed (one reference text per record, each prompt once) takes the plain path under both "
                "defaults and is not timed here"}
    out["peak_gflops"] = {"per_rep": peaks_seen, "best": best,
                          "what": "before every repetition: bench_peak.matmul_gflops(dtype, 2048, 3) (wall clock, "
                                  "best of 3 after a warm-up) and the same timed by this process's CPU clock "
                                  "(matmul_gflops_cpu); fraction_of_peak divides a rep's achieved GFLOP/s (wall) "
                                  "by that rep's wall peak, fraction_of_peak_cpu its GFLOP per CPU second by that "
                                  "rep's CPU-clock peak"}
    out["flops_model"] = {"params": n_params, "non_embedding_params": n_body, "head_params": n_head,
                          "per_forward_token": 2 * n_body, "per_head_row": 2 * n_head,
                          "what": "2 x non-embedding params per forward token + 2 x V x H per output-head row; "
                                  "attention and padding not counted (sampling_flops, scoring_flops)"}
    out["bf16_copy"] = {"seconds_to_make": copy_seconds, "bytes": copy_bytes,
                        "fp32_model_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
    out["env"] = _env(torch.get_num_threads(), loadavg_start=load_start, loadavg_end=os.getloadavg(),
                      affinity=sorted(os.sched_getaffinity(0)), note=args.note,
                      omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
                      records=[r.record_id for r in records], prompt_tokens=[len(p) for p in prompts],
                      n_per_record=cfg.n_per_record, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size,
                      scored_tokens=n_scored, bf16_native=bf16_is_native(torch.device("cpu")))
    _write(args, "stage", out, load_start)
    print("defaults:", out["defaults"])
    print("precision vs fp32:", out["sampling_precision_vs_fp32"])
    print("best peaks:", best)


def bf16_body_main(args) -> None:
    """Per-token log-prob error of autocast_bf16 against fp32 on humaneval reference texts."""
    from leakaudit.prompting import reference_text_ids

    load_start = benchlib.load_average()
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
    _write(args, "bf16-body", out, load_start)
    print({k: v for k, v in out.items() if k != "env"})


def main() -> None:
    ap = benchlib.parser("signals", __doc__)
    ap.add_argument("--mode", choices=["baseline", "prefix", "bf16-body", "stage"], default="baseline")
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
    ap.add_argument("--note", default="", help="stage mode: free text stored with the run (what else ran)")
    # 1 thread by default: on an oversubscribed shared CPU two threads make small matmuls ~50x slower (OpenMP
    # barriers wait on descheduled threads). --out: each mode has its own file under bench/results/.
    ap.set_defaults(threads=1, out=None)
    args = ap.parse_args()

    benchlib.apply_threads(args)
    if args.mode == "prefix":
        return prefix_main(args)
    if args.mode == "bf16-body":
        return bf16_body_main(args)
    if args.mode == "stage":
        return stage_main(args)
    args.out = args.out or benchlib.RESULTS / "signals.json"
    threads = torch.get_num_threads()
    load_before = benchlib.load_average()
    tok = load_tokenizer(MODEL)
    model = load_model(MODEL)
    n_params = sum(p.numel() for p in model.parameters())
    eos = tok.eos_token_id
    batching = {"score_batch_size": 16, "max_batch_tokens": 4096, "share_prefix": False}  # as when recorded
    fp32 = HFBackend.from_model(model, autocast_bf16=False, sample_bf16=False, **batching)
    bf16 = HFBackend.from_model(model, autocast_bf16=True, sample_bf16=True, **batching)

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
    benchlib.write_result(args.out, "signals", params={**vars(args), "model": MODEL, "model_params": n_params},
                          metrics=results, load_before=load_before)

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
