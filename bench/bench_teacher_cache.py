"""Benchmark: the teacher's prefix KV cache in OPD training (OPDConfig.teacher_prefix_cache), on vs off side by side.

Three measurements per model shape, all on the default preset's batch (8 humaneval records, 48 new tokens,
full_rkl, lr 1e-4, bf16 autocast; a separate frozen teacher of the same shape, as the default study's prepared
teacher):
1. teacher forward alone, alternating in one loop: the full forward (batching.completion_logits) vs the cached
   forward with the batch's caches left-padded into one forward vs one record per forward; plus the one-off
   cost of building the cache, its size, and the log-prob difference to the full forward (fp32 and bf16);
2. seconds per OPD step through the real train_student, cache off / on / on / off (ABBA, so a drift in the
   machine's load cancels); step 0 of a cached run also builds the cache, so it is reported apart;
3. where a step's time goes (rollout / student forward / teacher forward / loss / backward / optimizer),
   from timers wrapped around the trainer's calls in the runs of 2.

    python bench/bench_teacher_cache.py                       # tiny and smollm2-135m (real weights)
    python bench/bench_teacher_cache.py --shapes tiny --threads 1
    python bench/bench_teacher_cache.py --random-weights      # 135M shape, random init from its config.json
Writes bench/results/teacher_cache.json (bench/benchlib.py's schema: ratios, load averages, thread count).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

import benchlib


def _now() -> float:
    return time.perf_counter()


def build_models(shape: str, work: Path, random_weights: bool) -> str:
    """A model directory of `shape` ('tiny' or 'smollm2-135m')."""
    from leakaudit.models import make_tiny_llama, resolve_model_ref

    if shape == "tiny":
        return str(make_tiny_llama(work / "tiny", seed=0))
    real = resolve_model_ref(shape)
    if not random_weights:
        return real
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(AutoConfig.from_pretrained(real))
    out = work / f"{shape}-random"
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(real).save_pretrained(out)
    return str(out)


def bench_records(n: int):
    from leakaudit.data.sources import load_source

    return load_source("humaneval", limit=n, seed=0)


def teacher_forward(model_dir: str, records, *, new_tokens: int, rounds: int) -> dict:
    """Measurement 1: the teacher forward alone, full vs cached (padded batch / per record), alternating."""
    from leakaudit.models import LoadOptions, load_model, load_tokenizer
    from leakaudit.padding import right_pad
    from leakaudit.prompting import teacher_prompt_ids
    from shadow_models.batching import completion_logits
    from shadow_models.losses import sampled_logps
    from shadow_models.modeling import autocast
    from shadow_models.teacher_cache import TeacherPrefixCache

    tok = load_tokenizer(model_dir)
    model = load_model(model_dir, LoadOptions(dtype="float32"))
    model.requires_grad_(False)
    contexts = [teacher_prompt_ids(tok, r) for r in records]
    g = torch.Generator().manual_seed(0)
    # completion lengths as sampled ones end: most at the budget, some at EOS earlier
    lengths = [new_tokens if i % 3 else max(new_tokens // 2 + i, 1) for i in range(len(records))]
    comps = [torch.randint(200, 20000, (n,), generator=g).tolist() for n in lengths]
    for c, n in zip(comps, lengths):
        if n < new_tokens:
            c[-1] = int(tok.eos_token_id)
    pad_id = int(tok.pad_token_id)
    ids, mask = right_pad(comps, pad_id)
    keep = mask.bool()
    out: dict = {"context_lengths": [len(c) for c in contexts], "completion_lengths": lengths}
    with torch.no_grad():  # the fp32 full forward: what every bf16 variant's error is measured against
        lp_fp32 = sampled_logps(completion_logits(model, contexts, ids, mask, pad_id).float(), ids)
    for precision, bf16 in (("bf16", True), ("fp32", False)):
        amp = autocast(torch.device("cpu"), bf16)
        cache = TeacherPrefixCache()
        with torch.no_grad(), amp:
            t0 = _now()
            cache.ensure(model, contexts)
            build = _now() - t0
            variants = {
                "full": lambda: completion_logits(model, contexts, ids, mask, pad_id),
                "cached_padded_batch": lambda: cache.logits(model, contexts, ids, mask),
                "cached_per_record": lambda: cache.logits(model, contexts, ids, mask, rows_per_forward=1),
            }
            ref = variants["full"]().float()
            diffs = {}
            for name in ("cached_padded_batch", "cached_per_record"):
                got = variants[name]().float()
                dlogp = (sampled_logps(got, ids) - sampled_logps(ref, ids))[keep].abs()
                diffs[name] = {
                    "max_abs_logprob_diff": float(dlogp.max()), "mean_abs_logprob_diff": float(dlogp.mean()),
                    "max_abs_logit_diff": float((got - ref)[keep].abs().max())}
            vs_fp32 = {}
            for name in ("full", "cached_padded_batch"):
                err = (sampled_logps(variants[name]().float(), ids) - lp_fp32)[keep].abs()
                vs_fp32[name] = {"max_abs_logprob_diff": float(err.max()), "mean_abs_logprob_diff": float(err.mean())}
            times = collections.defaultdict(list)
            for _ in range(rounds):
                for name, fn in variants.items():
                    t0 = _now()
                    fn()
                    times[name].append(_now() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        out[precision] = {
            "seconds_median": med, "seconds_all": dict(times),
            "speedup_vs_full": {k: med["full"] / med[k] for k in med if k != "full"},
            "cache_build_seconds": build, "cache_mb": cache.nbytes() / 2**20,
            "cache_mb_per_record": cache.nbytes() / 2**20 / len(contexts),
            "diff_vs_full": diffs, "error_vs_fp32_full_forward": vs_fp32}
        cache.clear()
        print(f"  teacher forward {precision}: full {med['full']:.3f}s, cached padded "
              f"{med['cached_padded_batch']:.3f}s, per record {med['cached_per_record']:.3f}s; build {build:.3f}s; "
              f"max |dlogp| {max(d['max_abs_logprob_diff'] for d in diffs.values()):.2e}", flush=True)
    return out


class Timers:
    """Wrap the trainer's calls with timers, per step: rollout, student forward, teacher forward, loss, backward,
    optimizer (everything else in a step is 'other')."""

    def __init__(self) -> None:
        self.steps: list[dict] = []

    def _add(self, phase: str, dt: float) -> None:
        if self.steps:
            self.steps[-1][phase] = self.steps[-1].get(phase, 0.0) + dt

    def wrap(self, fn, phase_of):
        def inner(*a, **k):
            phase = phase_of(*a, **k)
            t0 = _now()
            try:
                return fn(*a, **k)
            finally:
                self._add(phase, _now() - t0)
        return inner

    @contextlib.contextmanager
    def installed(self):
        from accelerate import Accelerator

        from shadow_models import trainer
        from shadow_models.teacher_cache import TeacherPrefixCache

        orig = {"sample": trainer.sample_completions, "logits": trainer.completion_logits,
                "loss": trainer.per_token_loss, "update": trainer.optim.apply_update, "step": trainer._train_step,
                "backward": Accelerator.backward, "cached": TeacherPrefixCache.logits}

        def step(*a, **k):
            self.steps.append({})
            t0 = _now()
            try:
                return orig["step"](*a, **k)
            finally:
                self.steps[-1]["total"] = _now() - t0

        trainer.sample_completions = self.wrap(orig["sample"], lambda *a, **k: "rollout")
        trainer.completion_logits = self.wrap(
            orig["logits"], lambda *a, **k: "student_forward" if torch.is_grad_enabled() else "teacher_forward")
        trainer.per_token_loss = self.wrap(orig["loss"], lambda *a, **k: "loss")
        trainer.optim.apply_update = self.wrap(orig["update"], lambda *a, **k: "optimizer")
        trainer._train_step = step
        Accelerator.backward = self.wrap(orig["backward"], lambda *a, **k: "backward")
        TeacherPrefixCache.logits = self.wrap(orig["cached"], lambda *a, **k: "teacher_forward")
        try:
            yield self
        finally:
            trainer.sample_completions, trainer.completion_logits = orig["sample"], orig["logits"]
            trainer.per_token_loss, trainer.optim.apply_update = orig["loss"], orig["update"]
            trainer._train_step = orig["step"]
            Accelerator.backward, TeacherPrefixCache.logits = orig["backward"], orig["cached"]


PHASES = ("rollout", "student_forward", "teacher_forward", "loss", "backward", "optimizer")


def breakdown(steps: list[dict]) -> dict:
    mean = {p: statistics.mean(s.get(p, 0.0) for s in steps) for p in PHASES}
    total = statistics.mean(s["total"] for s in steps)
    mean["other"] = total - sum(mean.values())
    return {"seconds": {**mean, "total": total}, "fraction": {p: v / total for p, v in mean.items()}}


def train_steps(model_dir: str, records, *, new_tokens: int, steps: int, work: Path, order: str) -> dict:
    """Measurements 2 and 3: train_student with the cache off / on in `order` (e.g. 'off,on,on,off'), `steps` + 1
    steps each."""
    from shadow_models import OPDConfig, train_student

    base = OPDConfig(batch_size=len(records), epochs=steps + 1, max_new_tokens=new_tokens, learning_rate=1e-4,
                     loss="full_rkl", bf16_autocast=True, seed=0)
    runs = []
    for i, on in enumerate(o == "on" for o in order.split(",")):
        cfg = replace(base, teacher_prefix_cache=on)
        out = work / f"run{i}_{'on' if on else 'off'}"
        with Timers().installed() as timers:
            train_student(model_dir, records, out, cfg, teacher_model=model_dir, progress=False)
        ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
        shutil.rmtree(out)
        runs.append({"cache": on, "step_seconds": [s["total"] for s in timers.steps], "phases": timers.steps,
                     "teacher_kl": [e["teacher_kl"] for e in ledger],
                     "completion_tokens": [e["completion_tokens"] for e in ledger]})
        print(f"  run {i} cache={'on ' if on else 'off'}: " + " ".join(f"{s:.2f}" for s in runs[-1]["step_seconds"]),
              flush=True)
    off = [r for r in runs if not r["cache"]]
    on = [r for r in runs if r["cache"]]
    steady = {name: statistics.mean(s for r in rs for s in r["step_seconds"][1:]) for name, rs in
              (("off", off), ("on", on))}
    first = {name: statistics.mean(r["step_seconds"][0] for r in rs) for name, rs in (("off", off), ("on", on))}
    n_default = 30  # the default preset's steps per student
    amortised = {k: (first[k] + (n_default - 1) * steady[k]) / n_default for k in steady}
    kl_diff = max(abs(a - b) for r_on in on for r_off in off for a, b in zip(r_on["teacher_kl"], r_off["teacher_kl"]))
    return {
        "config": {"batch": len(records), "max_new_tokens": new_tokens, "loss": base.loss, "bf16_autocast": True,
                   "lr": base.learning_rate, "measured_steps_per_run": steps, "order": order},
        "sec_per_step_steady": steady, "sec_first_step": first, "sec_per_step_amortised_30_steps": amortised,
        "speedup_steady_off_over_on": steady["off"] / steady["on"],
        "speedup_amortised_30_steps": amortised["off"] / amortised["on"],
        "breakdown_steady": {name: breakdown([s for r in rs for s in r["phases"][1:]]) for name, rs in
                             (("off", off), ("on", on))},
        "breakdown_first_step_cache_on": breakdown([r["phases"][0] for r in on]),
        "max_abs_teacher_kl_diff_on_vs_off_bf16": kl_diff,
        "runs": runs,
    }


def main() -> None:
    from leakaudit.models import load_tokenizer
    from leakaudit.prompting import student_prompt_ids, teacher_prompt_ids

    ap = benchlib.parser("teacher_cache", __doc__)
    ap.add_argument("--shapes", default="tiny,smollm2-135m")
    ap.add_argument("--random-weights", action="store_true", help="135M shape with random weights")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per training run (after step 0)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of the teacher-forward timing")
    ap.add_argument("--order", default="off,on,on,off", help="training runs, cache off/on, in this order")
    ap.add_argument("--teacher-forward-only", action="store_true",
                    help="rerun measurement 1 only and replace it in the existing --out JSON (training runs kept)")
    ap.add_argument("--note", default="", help="free text stored in the JSON (e.g. that the machine was loaded)")
    args = ap.parse_args()
    benchlib.apply_threads(args)
    load = benchlib.load_average()

    records = bench_records(args.batch)
    tok = load_tokenizer("smollm2-135m")
    lengths = {"student_prompt": [len(student_prompt_ids(tok, r)) for r in records],
               "teacher_context": [len(teacher_prompt_ids(tok, r)) for r in records]}
    print(f"records: student prompts {lengths['student_prompt']}, teacher contexts {lengths['teacher_context']}")
    result: dict = {"records": {"source": "humaneval", "seed": 0, "record_ids": [r.record_id for r in records],
                                "token_lengths": lengths},
                    "shapes": {}, "note": args.note}
    with tempfile.TemporaryDirectory(prefix="bench_teacher_cache_") as tmp:
        for shape in [s for s in args.shapes.split(",") if s]:
            work = Path(tmp) / shape
            work.mkdir()
            model_dir = build_models(shape, work, args.random_weights)
            print(f"{shape}: {model_dir}", flush=True)
            load_before = benchlib.load_average()
            t0 = time.time()
            tf = teacher_forward(model_dir, records, new_tokens=args.new_tokens, rounds=args.rounds)
            if args.teacher_forward_only:
                old = json.loads(Path(args.out).read_text(encoding="utf-8"))
                old["metrics"]["shapes"][shape]["teacher_forward"] = {
                    **tf, "rerun": {"params": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                    "machine": benchlib.machine(load_before)}}
                benchlib.write_json(args.out, old)
                print(f"updated {args.out}")
                continue
            tr = train_steps(model_dir, records, new_tokens=args.new_tokens, steps=args.steps, work=work,
                             order=args.order)
            result["shapes"][shape] = {
                "model": "make_tiny_llama (2 layers, 32 wide, SmolLM2 vocabulary)" if shape == "tiny" else
                         f"{shape} shape, {'random' if args.random_weights else 'real'} weights",
                "teacher_forward": tf, "train": tr, "wall_s": round(time.time() - t0, 1),
                "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
            print(f"  steady s/step off {tr['sec_per_step_steady']['off']:.3f} on {tr['sec_per_step_steady']['on']:.3f}"
                  f" -> x{tr['speedup_steady_off_over_on']:.3f} (amortised over 30 steps x"
                  f"{tr['speedup_amortised_30_steps']:.3f}); teacher forward fraction (off) "
                  f"{tr['breakdown_steady']['off']['fraction']['teacher_forward']:.3f}", flush=True)
    if args.teacher_forward_only:
        return
    benchlib.write_result(args.out, "teacher_cache", params=vars(args), metrics=result, load_before=load)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
