"""The prepared GPU check: one run, within a time budget, on one GPU with no network.

Parts, in priority order; each runs in its own subprocess with its own timeout (min(part limit, budget left)),
reports its own failure and the next part runs anyway; what a part measured before it failed or timed out is
kept (a part saves its record after every measurement):

  env          python / torch / CUDA versions, GPU name and memory, TF32 flags, the CPU record (envinfo.cpu_info),
               library versions, which device the study's signal backend would pick by default
  models       builds the random models: 'tiny' (a 4-layer 128-wide Llama) and 'qwen' (Qwen2.5-0.5B's shape,
               bench/configs/qwen2.5-0.5b.json, 402M parameters with the SmolLM2 vocabulary), both with the
               SmolLM2 tokenizer shipped in bench/configs/smollm2_tokenizer
  logprobs     per-token log-probs (and Min-K%++'s mu/sigma) on the device in fp32, bf16 autocast (and the
               backend's bf16_body mode where it exists) against CPU fp32: max / mean abs error and a stated
               tolerance; the tiny model, and the qwen shape on a GPU
  opd          shadow_models.train_student at the qwen shape: 8 records (~140-token prompts, ~320-token teacher
               contexts, the default preset's shapes), batch 8, 48 new tokens, bf16 autocast, 3 steps; seconds
               per step from its ledger, a FLOP estimate as a fraction of the measured bf16 matmul peak, peak
               GPU memory; then, side by side on the same batch, the teacher prefix KV cache (where OPDConfig has
               teacher_prefix_cache) and LoRA rank 16
  opd_multi    with 2 or more GPUs visible: the tiny model's student trained by all of them at once (`accelerate
               launch --multi_gpu`, shadow_models.launch_check) and by one, same seed and global batch: largest
               weight difference, ledgers compared, seconds; skipped (and said so) with fewer GPUs
  signals      sampling and scoring tokens/s at the qwen shape through the transformers signal backend
               (open_backend's backend, device passed explicitly, see _open_backend): fp32, fp32 with Min-K%++
               statistics, bf16 autocast; then share_prefill / share_prefix where HFOptions has them, with their
               speed-up and their largest score difference to the plain path
  study_tiny   `leakaudit run-study --preset tiny` on the tiny model, bf16 on a GPU: wall time per stage from the
               `[stage] done in X s` lines
  study_qwen   the same study on the qwen-shape model
  study_ray    the tiny study again with execution.backend=ray: one student per GPU task
               (execution.gpus_per_student=1) on a Ray instance the study starts; skipped, and said so, where ray
               is not importable (its wheel, ~70 MB, does not fit the 64 MiB carry, so bench/gpu_wheels.sh leaves
               it out: this part runs only on an image that has ray). Not in the --cpu-smoke parts.

Writes <out>/gpu_check.json (everything, in bench/benchlib.py's schema: the parts, the summary and the budget as
metrics; the machine record leaves the device to the env part) and <out>/gpu_check.log (every part's own output),
prints one line per part and a summary. `--cpu-smoke` runs every part on the CPU at small shapes (the qwen shape
shrunk to 2 layers x 64 wide, keeping its Qwen2 architecture) so that tests/test_gpu_check.py keeps the script from
rotting; `--in-process` runs the parts in this process (faster, no per-part timeouts; used by the test).

Run on the GPU machine through bench/gpu_check.sh (it installs the carried wheels and sets the environment).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import benchlib

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "bench" / "configs"
TOKENIZER_DIR = CONFIGS / "smollm2_tokenizer"
QWEN_CONFIG = CONFIGS / "qwen2.5-0.5b.json"

TINY_LLAMA = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
              "tie_word_embeddings": True, "rms_norm_eps": 1e-5}
SMOKE_TINY = {**TINY_LLAMA, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
"""--cpu-smoke's tiny model: the shape of the test suite's make_tiny_llama (the output head dominates on a CPU)."""
SMOKE_QWEN = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}
"""--cpu-smoke: the qwen config with these fields replaced (same architecture and vocabulary, a few MB)."""

PART_LIMITS_S = {"env": 60, "models": 120, "logprobs": 90, "opd": 150, "opd_multi": 150, "signals": 120,
                 "study_tiny": 150, "study_qwen": 240, "study_ray": 150}
PARTS = tuple(PART_LIMITS_S)
SMOKE_PARTS = ("env", "models", "logprobs", "opd", "signals", "study_tiny")
RESERVE_S = 5
"""Seconds of the budget kept for writing the summary."""
DEFAULT_BUDGET_S = 420
"""Whole-run budget: leaves a 600 s device command room for the shell part, and the 15 device-minutes of a
session room for the machine's start and one rerun."""

TOLERANCES = {"fp32": {"max": 1e-3, "mean": 1e-4},
              "bf16_autocast": {"max": 0.25, "mean": 0.02},
              "bf16_body": {"max": 0.25, "mean": 0.02}}
"""Per-token log-prob error against CPU fp32, in nats. fp32 on a GPU (TF32 off, torch's default for matmuls)
should agree to float noise; bf16's bound is the CPU bf16 error measured on smollm2-135m (mean 0.016 / max 0.18,
bench/results/signals.json) rounded up: bf16 on a GPU is expected to be no worse."""


# --------------------------------------------------------------------------------------------- small helpers
def log(msg: str) -> None:
    print(msg, flush=True)


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    tmp.replace(path)


class Recorder(dict):
    """A part's result: a dict saved to its JSON file after every measurement (`save`)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path

    def save(self) -> None:
        _write_json(self.path, dict(self))


def load_tokenizer(path: Path = TOKENIZER_DIR) -> Any:
    """The SmolLM2 tokenizer from the files shipped in bench/configs/smollm2_tokenizer (no model, no network)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path))
    except Exception:  # noqa: BLE001 - an older transformers without TokenizersBackend: build it by hand
        from transformers import PreTrainedTokenizerFast

        cfg = json.loads((path / "tokenizer_config.json").read_text())
        tok = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"),
                                      **{k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                                         if k in cfg})
        tok.chat_template = (path / "chat_template.jinja").read_text()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def qwen_config(smoke: bool = False) -> dict[str, Any]:
    """bench/configs/qwen2.5-0.5b.json without its '_' keys; shrunk by SMOKE_QWEN when `smoke`."""
    cfg = {k: v for k, v in json.loads(QWEN_CONFIG.read_text()).items() if not k.startswith("_")}
    if smoke:
        cfg.update(SMOKE_QWEN)
        cfg["max_window_layers"] = cfg["num_hidden_layers"]
    return cfg


def build_model(cfg: dict[str, Any], tokenizer: Any, out: Path, *, seed: int = 0, device: str = "cpu") -> dict:
    """Write a randomly initialised causal LM of config `cfg` (float32, safetensors) with `tokenizer` to `out`.
    The weights are initialised on `device` (fast on a GPU); returns {'parameters', 'seconds', 'dir'}."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    start = time.time()
    cfg = {k: v for k, v in cfg.items() if k != "architectures"}
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    cfg = {**cfg, **ids, "vocab_size": len(tokenizer)}
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.bos_token_id = ids["bos_token_id"]
    model.generation_config.eos_token_id = ids["eos_token_id"]
    model.generation_config.pad_token_id = ids["pad_token_id"]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    (out / "BUILT").write_text(json.dumps({"parameters": n}))
    return {"dir": str(out), "parameters": n, "architecture": type(model).__name__,
            "seconds": round(time.time() - start, 2)}


def model_dir(work: Path, name: str) -> Path:
    d = work / "models" / name
    if not (d / "BUILT").is_file():
        raise RuntimeError(f"model '{name}' was not built (the models part failed or did not run): {d}")
    return d


TOPICS = ["the Pythagorean theorem", "photosynthesis", "binary search", "the French revolution", "insulin",
          "compound interest", "plate tectonics", "recursion", "the water cycle", "vaccines", "prime numbers",
          "supply and demand", "black holes", "hash tables", "the immune system", "derivatives"]


def synthetic_records(n: int, *, prompt_sentences: int = 5, privileged_sentences: int = 7) -> list:
    """n records shaped like the default preset's: ~140-token prompts and ~320-token teacher contexts (prompt +
    privileged text in the teacher template) with the SmolLM2 tokenizer's chat template (148 and 323 tokens)."""
    from leakaudit.data.records import Record

    out = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        prompt = f"Problem {i}: explain {topic} to a first-year student and compute the example below." + "".join(
            f" Step {k}: consider case {i * 7 + k} of {topic} and state what changes when it doubles."
            for k in range(prompt_sentences))
        privileged = f"Worked solution for problem {i}." + "".join(
            f" In case {i * 7 + k} the quantity becomes {3 * k + i}, so the answer moves by {k + 1}."
            for k in range(privileged_sentences))
        out.append(Record("math", prompt, privileged, answer=str(i), source="gpu_check"))
    return out


def _device(args: argparse.Namespace) -> str:
    import torch

    if args.cpu_smoke:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_memory(device: str) -> dict[str, Any]:
    import resource

    import torch

    out: dict[str, Any] = {"max_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3)}
    if device.startswith("cuda"):
        out["cuda_max_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 3)
        out["cuda_max_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2 ** 30, 3)
    return out


@contextlib.contextmanager
def _open_backend(ref: str, device: str, **opts: Any) -> Iterator[Any]:
    """The transformers signal backend on `device`. open_backend (what the study uses) is called when it takes a
    `device` option; today it does not, so the same backend is built through make_backend with the device named.
    The study path (Study._backend -> open_backend) cannot choose a device: it gets HFOptions' default, 'auto'
    (cuda when available) since the signals speed work, 'cpu' before it; the env part records which,
    and the study parts would show it in their signal stage times."""
    import gc
    import inspect

    from leakaudit.signals import backend as B

    if "device" in inspect.signature(B.open_backend).parameters:
        with B.open_backend("transformers", ref, device=device, **opts) as b:
            yield b
        return
    b = B.make_backend("transformers", ref, device=device, **opts)
    try:
        yield b
    finally:
        del b
        gc.collect()


def _errors(a: list, b: list, field: str):
    import numpy as np

    x = np.concatenate([getattr(s, field) for s in a])
    y = np.concatenate([getattr(s, field) for s in b])
    d = np.abs(x.astype(np.float64) - y.astype(np.float64))
    return float(d.max()), float(d.mean())


def gpu_matmul_tflops(n: int = 8192, reps: int = 10) -> dict[str, float]:
    """Mean TFLOP/s of n x n x n torch.matmul on the GPU in bf16 and in fp32 (TF32 as torch has it: off by
    default), after 3 warm-ups, timed with CUDA events: the peak that achieved FLOP/s is a fraction of."""
    import torch

    out = {}
    for name in ("bfloat16", "float32"):
        a = torch.randn(n, n, device="cuda", dtype=getattr(torch, name))
        b = torch.randn(n, n, device="cuda", dtype=getattr(torch, name))
        for _ in range(3):
            a @ b
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            a @ b
        end.record()
        torch.cuda.synchronize()
        out[name] = round(2 * n ** 3 * reps / (start.elapsed_time(end) / 1e3) / 1e12, 1)
        del a, b
    torch.cuda.empty_cache()
    return out


def peak_flops(work: Path, device: str) -> float | None:
    """The bf16 matmul peak (FLOP/s) of `device`: the env part's GPU measurement, or on a CPU the recorded
    bench/bench_peak.py peak at torch's thread count; None when neither is there."""
    if device.startswith("cuda"):
        f = Path(work) / "peak.json"
        return json.loads(f.read_text())["bfloat16"] * 1e12 if f.is_file() else None
    try:
        from bench_peak import peak  # a sibling: bench/ is on the path of a script run from it

        return peak("bfloat16", measure_if_missing=False)
    except Exception:  # noqa: BLE001 - no recorded peak for this CPU / thread count
        return None


def _fraction(flops: float, seconds: float, peak: float | None) -> float | None:
    return round(flops / seconds / peak, 4) if peak and seconds > 0 else None


# --------------------------------------------------------------------------------------------- the parts
def part_env(args: argparse.Namespace, rec: Recorder) -> None:
    import platform

    import torch

    from leakaudit.envinfo import cpu_info, device_description, git_hash, library_versions

    rec.update({"python": platform.python_version(), "executable": sys.executable, "torch": torch.__version__,
                "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                "device_description": device_description(), "git": git_hash(REPO),
                "cpu": cpu_info(), "libraries": library_versions(), "mode": "cpu-smoke" if args.cpu_smoke else "gpu",
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision()})
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        rec["gpu"] = {"name": p.name, "count": torch.cuda.device_count(), "capability": f"{p.major}.{p.minor}",
                      "memory_gib": round(p.total_memory / 2 ** 30, 1), "multiprocessors": p.multi_processor_count,
                      "bf16_supported": torch.cuda.is_bf16_supported()}
        rec.save()
        rec["gpu_matmul_tflops"] = gpu_matmul_tflops()
        _write_json(Path(args.work) / "peak.json", rec["gpu_matmul_tflops"])
    rec.save()
    import inspect

    from leakaudit.signals import backend as B
    from leakaudit.signals.hf_backend import HFOptions

    rec["signal_backend"] = {"hfoptions_default_device": HFOptions().device,
                             "open_backend_takes_device": "device" in inspect.signature(B.open_backend).parameters,
                             "hfoptions_fields": sorted(HFOptions.__dataclass_fields__)}
    rec.save()


def part_models(args: argparse.Namespace, rec: Recorder) -> None:
    tok = load_tokenizer()
    rec["tokenizer"] = {"dir": str(TOKENIZER_DIR.relative_to(REPO)), "vocab": len(tok), "bos": tok.bos_token_id,
                        "eos": tok.eos_token_id, "pad": tok.pad_token_id, "chat_template": bool(tok.chat_template)}
    rec.save()
    device = _device(args)
    tiny = SMOKE_TINY if args.cpu_smoke else TINY_LLAMA
    rec["tiny"] = build_model(tiny, tok, Path(args.work) / "models" / "tiny", seed=0, device=device)
    rec.save()
    rec["qwen"] = build_model(qwen_config(args.cpu_smoke), tok, Path(args.work) / "models" / "qwen", seed=0,
                              device=device)
    rec["qwen"]["shape"] = "smoke (2 layers x 64)" if args.cpu_smoke else "Qwen2.5-0.5B (vocab 49152)"
    rec.save()


def _parity(ref: str, device: str, n_seqs: int, cont_len: int, rec: dict, save: Callable[[], None]) -> None:
    import numpy as np

    from leakaudit.signals.hf_backend import HFOptions

    tok = load_tokenizer()
    from leakaudit.prompting import student_prompt_ids

    prompts = [student_prompt_ids(tok, r) for r in synthetic_records(n_seqs, prompt_sentences=3)]
    rng = np.random.default_rng(0)
    conts = [rng.integers(3, len(tok), size=cont_len).tolist() for _ in prompts]
    rec.update({"sequences": n_seqs, "continuation_tokens": n_seqs * cont_len,
                "prompt_tokens_mean": round(float(np.mean([len(p) for p in prompts])), 1)})
    t = time.time()
    with _open_backend(ref, "cpu", score_batch_size=16) as b:
        base = b.score(prompts, conts, vocab_stats=True)
    rec["cpu_fp32_seconds"] = round(time.time() - t, 3)
    modes = [("fp32", {"autocast_bf16": False}), ("bf16_autocast", {"autocast_bf16": True})]
    if "bf16_body" in HFOptions.__dataclass_fields__:
        modes.append(("bf16_body", {"bf16_body": True}))
    for label, opts in modes:
        try:
            t = time.time()
            with _open_backend(ref, device, score_batch_size=16, **opts) as b:
                got = b.score(prompts, conts, vocab_stats=True)
            seconds = round(time.time() - t, 3)
            lp_max, lp_mean = _errors(got, base, "logp")
            mu_max, _ = _errors(got, base, "mu")
            sg_max, _ = _errors(got, base, "sigma")
            tol = TOLERANCES[label]
            rec[label] = {"device": device, "logp_max_abs": lp_max, "logp_mean_abs": lp_mean, "mu_max_abs": mu_max,
                          "sigma_max_abs": sg_max, "tolerance": tol,
                          "within_tolerance": bool(lp_max <= tol["max"] and lp_mean <= tol["mean"]),
                          "seconds": seconds}
        except Exception as e:  # noqa: BLE001 - one mode failing must not hide the others
            rec[label] = {"error": f"{type(e).__name__}: {e}"}
        save()


def part_logprobs(args: argparse.Namespace, rec: Recorder) -> None:
    device = _device(args)
    rec["note"] = ("random-init models: their next-token distributions are near uniform, so these errors bound "
                   "the numerics of the code path, not a trained model's; tolerance in nats")
    rec["tiny"] = {}
    n, length = (8, 32) if args.cpu_smoke else (16, 64)
    _parity(str(model_dir(Path(args.work), "tiny")), device, n, length, rec["tiny"], rec.save)
    if device != "cpu" or args.cpu_smoke:
        rec["qwen"] = {}
        n, length = (8, 48) if not args.cpu_smoke else (4, 16)
        _parity(str(model_dir(Path(args.work), "qwen")), device, n, length, rec["qwen"], rec.save)


def _opd_once(base: str, records: list, out: Path, cfg: Any, device: str, shape: dict, work: Path) -> dict:
    """One train_student run; its ledger's seconds per step, FLOP estimate and peak memory."""
    import torch

    from shadow_models.trainer import train_student

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    shutil.rmtree(out, ignore_errors=True)
    rec: dict[str, Any] = {}
    t = time.time()
    train_student(base, records, out, cfg, progress=False)
    rec["wall_seconds"] = round(time.time() - t, 2)
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines() if line.strip()]
    secs = [e["seconds"] for e in ledger]
    rec["step_seconds"] = secs
    rec["completion_tokens"] = [e["completion_tokens"] for e in ledger]
    rec["teacher_kl"] = [e["teacher_kl"] for e in ledger]
    later = secs[1:] or secs
    rec["step_seconds_after_first"] = round(sum(later) / len(later), 4)
    rec["trainer_device"] = json.loads((out / "meta.json").read_text()).get("device")
    # FLOPs per step, matmuls only (2 P per token forward, 6 P forward + backward; attention scores left out):
    # rollout 2P(prompt + completion), student training 6P(prompt + completion), teacher 2P(teacher + completion)
    params = json.loads((Path(base) / "BUILT").read_text())["parameters"]
    sp, tp, batch = shape["prompt_tokens_mean"], shape["teacher_tokens_mean"], shape["batch_size"]
    flops = [params * (2 * (sp * batch + c) + 6 * (sp * batch + c) + 2 * (tp * batch + c))
             for c in rec["completion_tokens"]]
    peak = peak_flops(work, device)
    rec["estimate"] = {"parameters": params, "tflop_per_step": [round(f / 1e12, 3) for f in flops],
                       "bf16_peak_tflops": round(peak / 1e12, 2) if peak else None,
                       "fraction_of_bf16_peak": [_fraction(f, t, peak) for f, t in zip(flops, secs)],
                       "formula": "P x (2(prompt+completion) rollout + 6(prompt+completion) train + "
                                  "2(teacher+completion) teacher), tokens summed over the batch; the teacher "
                                  "prefix cache skips most of the teacher term"}
    rec["memory"] = _peak_memory(device)  # max_rss is the process's so far, not this run's alone
    shutil.rmtree(out, ignore_errors=True)  # 1.6 GB of fp32 weights at the qwen shape
    return rec


def part_opd(args: argparse.Namespace, rec: Recorder) -> None:
    import dataclasses

    from leakaudit.prompting import student_prompt_ids, teacher_prompt_ids
    from shadow_models.config import OPDConfig

    device = _device(args)
    work = Path(args.work)
    base = str(model_dir(work, "qwen"))
    if args.cpu_smoke:
        n, batch, epochs, new = 4, 2, 1, 8
    else:
        n, batch, epochs, new = 8, 8, 3, 48
    records = synthetic_records(n)
    tok = load_tokenizer()
    rec["shape"] = {"records": n, "batch_size": batch, "steps": epochs * -(-n // batch), "max_new_tokens": new,
                    "prompt_tokens_mean": round(sum(len(student_prompt_ids(tok, r)) for r in records) / n, 1),
                    "teacher_tokens_mean": round(sum(len(teacher_prompt_ids(tok, r)) for r in records) / n, 1),
                    "bf16_autocast": True, "lora_rank": 0, "loss": "sampled_rkl", "teacher": "self (frozen base)"}
    rec.save()
    cfg = OPDConfig(seed=0, epochs=epochs, batch_size=batch, max_new_tokens=new, bf16_autocast=True,
                    learning_rate=1e-5)
    rec.update(_opd_once(base, records, work / "opd_student", cfg, device, rec["shape"], work))
    rec.save()
    # side by side, where the trainer has them: the teacher's prefix KV cache, and LoRA (rank 16)
    variants = []
    if "teacher_prefix_cache" in OPDConfig.__dataclass_fields__:
        variants.append(("teacher_prefix_cache", {"teacher_prefix_cache": True}))
    variants.append(("lora16", {"lora_rank": 16}))
    rec["variants"] = {}
    for name, change in variants:
        try:
            r = _opd_once(base, records, work / "opd_student", dataclasses.replace(cfg, **change), device,
                          rec["shape"], work)
            r["speedup_after_first"] = round(rec["step_seconds_after_first"] / r["step_seconds_after_first"], 3)
            rec["variants"][name] = r
        except Exception as e:  # noqa: BLE001 - a variant failing must not hide the plain run
            rec["variants"][name] = {"error": f"{type(e).__name__}: {e}"}
        rec.save()


def part_signals(args: argparse.Namespace, rec: Recorder) -> None:
    import dataclasses

    import torch

    from leakaudit.prompting import student_prompt_ids
    from leakaudit.signals.backend import SamplingConfig

    device = _device(args)
    ref = str(model_dir(Path(args.work), "qwen"))
    tok = load_tokenizer()
    n_prompts, n_per, new = (4, 2, 8) if args.cpu_smoke else (16, 4, 64)
    prompts = [student_prompt_ids(tok, r) for r in synthetic_records(n_prompts)]
    cfg = SamplingConfig(n_per_record=n_per, temperature=1.0, top_p=1.0, max_new_tokens=new, seed=0,
                         batch_size=n_prompts * n_per)
    rec["shape"] = {"prompts": n_prompts, "n_per_record": n_per, "max_new_tokens": new,
                    "prompt_tokens_mean": round(sum(map(len, prompts)) / n_prompts, 1), "batch_size": cfg.batch_size}
    rec.save()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    params = json.loads((Path(ref) / "BUILT").read_text())["parameters"]
    peak = peak_flops(Path(args.work), device)
    rec["bf16_peak_tflops"] = round(peak / 1e12, 2) if peak else None
    rec["fraction_formula"] = "2 P x tokens through the model (prefixes included) / seconds / bf16 matmul peak"
    comps: list[list[list[int]]] = []
    with _open_backend(ref, device, score_batch_size=16, autocast_bf16=False) as b:
        b.sample(prompts[:2], dataclasses.replace(cfg, n_per_record=1, max_new_tokens=4))  # warm-up
        _sync(device)
        t = time.time()
        comps = b.sample(prompts, cfg)
        _sync(device)
        dt = time.time() - t
        n_tok = sum(len(c) for row in comps for c in row)
        rec["sampling"] = {"tokens": n_tok, "seconds": round(dt, 3), "tokens_per_s": round(n_tok / dt, 1),
                           "bf16_weight_copy": bool(getattr(b, "sample_bf16", False)), "device": str(b.device),
                           "fraction_of_bf16_peak": _fraction(
                               2 * params * (n_tok + n_per * sum(map(len, prompts))), dt, peak)}
        rec.save()
        prefixes = [prompts[i] for i, row in enumerate(comps) for c in row if c]
        conts = [c for row in comps for c in row if c]
        rec["scoring_shape"] = {"sequences": len(conts), "continuation_tokens": sum(map(len, conts)),
                                "total_tokens": sum(map(len, conts)) + sum(map(len, prefixes))}
        b.score(prefixes[:2], conts[:2])  # warm-up
        for label, stats in (("fp32", False), ("fp32_vocab_stats", True)):
            t = time.time()
            scored = b.score(prefixes, conts, vocab_stats=stats)
            dt = time.time() - t
            if stats:
                plain_scores = scored
            rec[f"scoring_{label}"] = {"seconds": round(dt, 3),
                                       "continuation_tokens_per_s": round(rec["scoring_shape"]["continuation_tokens"]
                                                                          / dt, 1),
                                       "total_tokens_per_s": round(rec["scoring_shape"]["total_tokens"] / dt, 1),
                                       "fraction_of_bf16_peak": _fraction(
                                           2 * params * rec["scoring_shape"]["total_tokens"], dt, peak)}
            rec.save()
    with _open_backend(ref, device, score_batch_size=16, autocast_bf16=True) as b:
        b.score(prefixes[:2], conts[:2])
        t = time.time()
        b.score(prefixes, conts, vocab_stats=True)
        dt = time.time() - t
        rec["scoring_bf16_autocast_vocab_stats"] = {
            "seconds": round(dt, 3),
            "continuation_tokens_per_s": round(rec["scoring_shape"]["continuation_tokens"] / dt, 1),
            "total_tokens_per_s": round(rec["scoring_shape"]["total_tokens"] / dt, 1),
            "fraction_of_bf16_peak": _fraction(2 * params * rec["scoring_shape"]["total_tokens"], dt, peak)}
    # side by side, where the backend has them: one prefill per prompt for its n trajectories (share_prefill),
    # one KV cache per prefix for scoring its continuations (share_prefix); same work, same shapes
    from leakaudit.signals.hf_backend import HFOptions

    shared = {k: True for k in ("share_prefill", "share_prefix") if k in HFOptions.__dataclass_fields__}
    if shared:
        rec["shared"] = {"options": sorted(shared)}
        try:
            with _open_backend(ref, device, score_batch_size=16, autocast_bf16=False, **shared) as b:
                b.sample(prompts[:2], dataclasses.replace(cfg, n_per_record=2, max_new_tokens=4))  # warm-up
                _sync(device)
                t = time.time()
                shared_comps = b.sample(prompts, cfg)
                _sync(device)
                dt = time.time() - t
                n_tok = sum(len(c) for row in shared_comps for c in row)
                rec["shared"]["sampling"] = {"tokens": n_tok, "seconds": round(dt, 3),
                                             "tokens_per_s": round(n_tok / dt, 1),
                                             "speedup": round(n_tok / dt / rec["sampling"]["tokens_per_s"], 3)}
                rec.save()
                b.score(prefixes[:2], conts[:2])  # warm-up
                t = time.time()
                shared_scores = b.score(prefixes, conts, vocab_stats=True)
                dt = time.time() - t
                tps = rec["scoring_shape"]["continuation_tokens"] / dt
                rec["shared"]["scoring_vs_plain_max_abs"] = {f: _errors(shared_scores, plain_scores, f)[0]
                                                             for f in ("logp", "mu", "sigma")}
                rec["shared"]["scoring_fp32_vocab_stats"] = {
                    "seconds": round(dt, 3), "continuation_tokens_per_s": round(tps, 1),
                    "speedup": round(tps / rec["scoring_fp32_vocab_stats"]["continuation_tokens_per_s"], 3)}
        except Exception as e:  # noqa: BLE001 - reported beside the plain numbers
            rec["shared"]["error"] = f"{type(e).__name__}: {e}"
    rec["memory"] = _peak_memory(device)
    rec.save()


STAGE_LINE = re.compile(r"^\[(\w+)\] done in ([0-9.]+) s", re.M)
WALL_LINE = re.compile(r"^wall time ([0-9.]+) s", re.M)


def parse_stage_times(text: str) -> dict[str, float]:
    """{stage: seconds} from a study's `[stage] done in X s` lines (the last one per stage wins)."""
    return {m.group(1): float(m.group(2)) for m in STAGE_LINE.finditer(text)}


def study_command(python: str, model: str, out_root: Path, name: str, bf16: bool,
                  extra: tuple[str, ...] = ()) -> list[str]:
    cmd = [python, "-m", "leakaudit.cli", "run-study", "--preset", "tiny", "--set", f"base_model={model}",
           "--set", f"out_root={out_root}", "--set", f"name={name}"]
    if bf16:
        cmd += ["--set", "training.bf16_autocast=true", "--set", "signals.autocast_bf16=true"]
    for assignment in extra:
        cmd += ["--set", assignment]
    return cmd


RAY_STUDY_SETS = ("execution.backend=ray", "execution.gpus_per_student=1")
"""study_ray: the tiny study with each student (and each signals job) a Ray task holding one GPU."""


def run_study_part(args: argparse.Namespace, name: str, timeout: float, logf: Any) -> dict[str, Any]:
    """`leakaudit run-study --preset tiny` on the model `name` ('tiny' or 'qwen') as a subprocess; 'ray' = the tiny
    model with the Ray executor (skipped where ray is not importable)."""
    work = Path(args.work)
    rec: dict[str, Any] = {}
    extra: tuple[str, ...] = ()
    if name == "ray":
        if importlib.util.find_spec("ray") is None:
            return {"ok": False, "skipped": "ray is not installed here (not carried: its wheel exceeds the 64 MiB "
                                            "carry; bench/gpu_wheels.sh)"}
        extra = RAY_STUDY_SETS if not args.cpu_smoke else ("execution.backend=ray", "execution.gpus_per_student=0")
    try:
        model = str(model_dir(work, "tiny" if name == "ray" else name))
    except RuntimeError as e:
        return {"ok": False, "error": str(e)}
    bf16 = not args.cpu_smoke
    run_name = f"gpu_check_{name}"
    cmd = study_command(sys.executable, model, work / "studies", run_name, bf16, extra)
    rec.update({"command": " ".join(cmd), "bf16": bf16, "preset": "tiny"})
    if args.in_process:
        rc, out, timed_out, seconds = _run_cli_here(cmd[3:], logf)
    else:
        rc, out, timed_out, seconds = _run_subprocess(cmd, timeout, logf)
    rec.update({"returncode": rc, "timed_out": timed_out, "wall_seconds": round(seconds, 2),
                "stage_seconds": parse_stage_times(out)})
    wall = WALL_LINE.search(out)
    if wall:
        rec["study_wall_seconds"] = float(wall.group(1))
    root = work / "studies" / run_name
    env = root / "env.json"
    if env.is_file():
        e = json.loads(env.read_text())
        rec["env_device"] = e.get("device")
    metas = sorted((root / "models").glob("*/meta.json")) if (root / "models").is_dir() else []
    rec["student_devices"] = sorted({json.loads(m.read_text()).get("device") for m in metas})
    rec["artefacts"] = {n: (root / n).is_file() for n in ("metrics.json", "report.html", "scores.parquet")}
    rec["ok"] = rc == 0 and not timed_out and all(rec["artefacts"].values())
    if not rec["ok"]:
        rec["error"] = "\n".join(out.strip().splitlines()[-25:])
    return rec


# --------------------------------------------------------------------------------------------- orchestration
def part_opd_multi(args: argparse.Namespace, rec: Recorder) -> None:
    """One student of the tiny model trained by every visible GPU at once (`accelerate launch --multi_gpu`, NCCL)
    and by one GPU, same seed and global batch (shadow_models.launch_check: fp32, per-record rollout seeds): the
    largest weight difference, the ledgers compared, seconds of each. Skipped (and said so) with fewer than 2 GPUs;
    the same path on CPU processes is tests/test_multiprocess.py."""
    import socket

    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() and not args.cpu_smoke else 0
    rec["gpus_visible"] = n
    if n < 2:
        rec["skipped"] = f"{n} GPU(s) visible: the multi-process path needs 2 or more"
        return
    work = Path(args.work) / "opd_multi"
    shutil.rmtree(work, ignore_errors=True)
    base = str(model_dir(Path(args.work), "tiny"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    script = ["-m", "shadow_models.launch_check", "--base", base, "--n-records", str(4 * n + 1),
              "--batch-size", str(n + 1)]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runs = {"single": ([sys.executable, *script, "--out", str(work / "single")], {"CUDA_VISIBLE_DEVICES": "0"}),
            "multi": ([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(n),
                       "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                       "--main_process_port", str(port), *script, "--out", str(work / "multi")], {})}
    for name, (cmd, extra) in runs.items():
        t = time.time()
        res = subprocess.run(cmd, env={**env, **extra}, cwd=REPO, capture_output=True, text=True, timeout=120)
        rec[name] = {"rc": res.returncode, "seconds": round(time.time() - t, 2), "tail": res.stderr[-1500:]}
        rec.save()
        if res.returncode != 0:
            raise RuntimeError(f"{name} run failed (rc {res.returncode})")
    from safetensors.torch import load_file

    a, b = (load_file(str(work / k / "model.safetensors")) for k in ("single", "multi"))
    rec["max_weight_diff"] = max(float((a[k] - b[k]).abs().max()) for k in a)
    ledgers = [[json.loads(x) for x in (work / k / "ledger.jsonl").read_text().splitlines()] for k in ("single", "multi")]
    rec["same_records_and_lengths"] = all(x["record_ids"] == y["record_ids"] and
                                          x["completion_lengths"] == y["completion_lengths"]
                                          for x, y in zip(*ledgers, strict=True))
    rec["num_processes"] = json.loads((work / "multi" / "meta.json").read_text())["num_processes"]
    rec.save()


def _run_subprocess(cmd: list[str], timeout: float, logf: Any) -> tuple[int | None, str, bool, float]:
    """Run `cmd` in its own process group with `timeout`; its output goes to `logf` and is returned."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TQDM_DISABLE", "1")
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
                            start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    logf.write(out or "")
    logf.flush()
    return proc.returncode, out or "", timed_out, time.time() - start


def _run_cli_here(argv: list[str], logf: Any) -> tuple[int | None, str, bool, float]:
    """leakaudit.cli.main(argv) in this process (--in-process), its output captured; no timeout."""
    import io

    from leakaudit.cli import main as cli_main

    buf = io.StringIO()
    start = time.time()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = cli_main(argv)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            rc = 1
    out = buf.getvalue()
    logf.write(out)
    logf.flush()
    return rc, out, False, time.time() - start


PART_FUNCS: dict[str, Callable[[argparse.Namespace, Recorder], None]] = {
    "env": part_env, "models": part_models, "logprobs": part_logprobs, "opd": part_opd, "opd_multi": part_opd_multi,
    "signals": part_signals}


def _part_sleep(args: argparse.Namespace, rec: Recorder) -> None:
    """A test part: records that it started, then sleeps (tests the timeout path)."""
    rec["started"] = True
    rec.save()
    time.sleep(float(os.environ.get("GPU_CHECK_SLEEP_S", "30")))


def _part_fail(args: argparse.Namespace, rec: Recorder) -> None:
    """A test part that fails (tests the failure path)."""
    rec["started"] = True
    raise RuntimeError("planted failure")


PART_FUNCS["_sleep"] = _part_sleep
PART_FUNCS["_fail"] = _part_fail


def run_part_here(name: str, args: argparse.Namespace, result: Path) -> int:
    """Run one part in this process (the body of `--part NAME`): its record goes to `result`."""
    rec = Recorder(result)
    try:
        PART_FUNCS[name](args, rec)
        rec["ok"] = True
        code = 0
    except Exception as e:  # noqa: BLE001 - reported, then the next part runs
        rec["ok"] = False
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()[-4000:]
        traceback.print_exc()
        code = 1
    rec.save()
    return code


def _part_args(args: argparse.Namespace) -> list[str]:
    return ["--work", str(args.work)] + (["--cpu-smoke"] if args.cpu_smoke else [])


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    for stale in ("models", "opd_student", "studies", "parts"):  # a rerun must not resume or skip anything
        shutil.rmtree(work / stale, ignore_errors=True)
    (work / "parts").mkdir(parents=True, exist_ok=True)
    parts = args.parts or (SMOKE_PARTS if args.cpu_smoke else PARTS)
    load = benchlib.load_average()
    params = {k: v for k, v in vars(args).items() if k not in ("part", "result")}

    def save() -> None:  # no CUDA in this process: the parts' own processes use the GPU
        benchlib.write_result(json_path, "gpu_check", params=params, metrics=report, load_before=load, device=False)

    started = time.time()
    report: dict[str, Any] = {"what": "bench/gpu_check.py", "mode": "cpu-smoke" if args.cpu_smoke else
                              "gpu", "budget_s": args.budget_s, "parts": {},
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    json_path = out / "gpu_check.json"
    with open(out / "gpu_check.log", "a", encoding="utf-8") as logf:
        for name in parts:
            left = args.budget_s - (time.time() - started)
            limit = min(PART_LIMITS_S.get(name, 60) * (args.limit_scale or 1.0), left - RESERVE_S)
            if limit < args.min_part_s:
                report["parts"][name] = {"ok": False, "skipped": f"budget: {left:.0f} s left"}
                log(f"[gpu_check] {name}: SKIPPED (budget, {left:.0f} s left)")
                continue
            logf.write(f"\n===== part {name} (limit {limit:.0f} s) =====\n")
            logf.flush()
            t = time.time()
            if name.startswith("study_"):
                rec = run_study_part(args, name[len("study_"):], limit, logf)
            elif args.in_process:
                result = work / "parts" / f"{name}.json"
                with contextlib.redirect_stdout(logf), contextlib.redirect_stderr(logf):
                    run_part_here(name, args, result)
                rec = json.loads(result.read_text())
            else:
                result = work / "parts" / f"{name}.json"
                result.unlink(missing_ok=True)
                cmd = [sys.executable, str(Path(__file__).resolve()), "--part", name, "--result", str(result),
                       *_part_args(args)]
                rc, text, timed_out, _ = _run_subprocess(cmd, limit, logf)
                rec = json.loads(result.read_text()) if result.is_file() else {}
                if timed_out:
                    rec.update({"ok": False, "timed_out": True, "error": f"timed out after {limit:.0f} s"})
                elif rc != 0 or "ok" not in rec:
                    rec.setdefault("error", "\n".join(text.strip().splitlines()[-25:]))
                    rec["ok"] = False
                rec["returncode"] = rc
            rec["part_seconds"] = round(time.time() - t, 2)
            report["parts"][name] = rec
            report["elapsed_s"] = round(time.time() - started, 1)
            save()
            status = "ok" if rec.get("ok") else ("TIMEOUT" if rec.get("timed_out") else "FAILED")
            log(f"[gpu_check] {name}: {status} in {rec['part_seconds']:.1f} s"
                + ("" if rec.get("ok") else f": {str(rec.get('error', rec.get('skipped', '')))[-300:]}"))
    report["summary"] = summarise(report)
    report["elapsed_s"] = round(time.time() - started, 1)
    save()
    log("\n".join(report["summary"]))
    log(f"[gpu_check] wrote {json_path} and {out / 'gpu_check.log'} ({report['elapsed_s']} s)")
    return report


def _get(d: dict, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def summarise(report: dict[str, Any]) -> list[str]:
    """A few lines: what passed, and the headline numbers."""
    p = report["parts"]
    lines = ["== gpu_check summary (" + report["mode"] + ") =="]
    lines.append("parts: " + ", ".join(f"{k}={'ok' if v.get('ok') else 'FAIL'}" for k, v in p.items()))
    env = p.get("env", {})
    if env:
        if env.get("gpu_matmul_tflops"):
            lines.append(f"gpu matmul 8192^3: {env['gpu_matmul_tflops']} TFLOP/s")
        lines.append(f"env: python {env.get('python')}, torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), "
                     f"{env.get('device_description')}, signal backend default device "
                     f"{_get(env, 'signal_backend', 'hfoptions_default_device')}")
    for model in ("tiny", "qwen"):
        for mode in ("fp32", "bf16_autocast", "bf16_body"):
            r = _get(p, "logprobs", model, mode)
            if isinstance(r, dict) and "logp_max_abs" in r:
                lines.append(f"logprobs {model} {mode} vs CPU fp32: max {r['logp_max_abs']:.3g} / mean "
                             f"{r['logp_mean_abs']:.3g} nats (tolerance max {r['tolerance']['max']}, mean "
                             f"{r['tolerance']['mean']}): {'within' if r['within_tolerance'] else 'OUTSIDE'}")
    opd = p.get("opd", {})
    if "step_seconds" in opd:
        lines.append(f"opd (qwen shape, batch {opd['shape']['batch_size']} x {opd['shape']['max_new_tokens']} new "
                     f"tokens, bf16): step seconds {opd['step_seconds']}, after the first "
                     f"{opd['step_seconds_after_first']} s; fraction of bf16 peak "
                     f"{_get(opd, 'estimate', 'fraction_of_bf16_peak')}; memory {opd.get('memory')}")
        for name, v in (opd.get("variants") or {}).items():
            lines.append(f"  opd {name}: " + (f"step seconds {v['step_seconds']}, speed-up after the first "
                                              f"{v['speedup_after_first']}x, memory {v.get('memory')}"
                                              if "step_seconds" in v else f"FAILED {v.get('error')}"))
    multi = p.get("opd_multi", {})
    if multi.get("skipped"):
        lines.append(f"opd_multi: skipped ({multi['skipped']})")
    elif "max_weight_diff" in multi:
        lines.append(f"opd_multi: {multi['num_processes']} GPUs vs 1: max weight diff {multi['max_weight_diff']:.2e}, "
                     f"same records and lengths {multi['same_records_and_lengths']}, seconds "
                     f"{multi['multi']['seconds']} vs {multi['single']['seconds']}")
    sig = p.get("signals", {})
    if "sampling" in sig:
        lines.append(f"sampling (qwen shape): {sig['sampling']['tokens_per_s']} tokens/s "
                     f"({sig['sampling']['tokens']} tokens, bf16 {sig['sampling']['bf16_weight_copy']})")
    for label in ("fp32", "fp32_vocab_stats", "bf16_autocast_vocab_stats"):
        r = sig.get(f"scoring_{label}")
        if r:
            lines.append(f"scoring {label}: {r['continuation_tokens_per_s']} continuation tokens/s "
                         f"({r['total_tokens_per_s']} incl. prefixes)")
    for kind in ("sampling", "scoring_fp32_vocab_stats"):
        r = _get(sig, "shared", kind)
        if r:
            tps = r.get("tokens_per_s") or r.get("continuation_tokens_per_s")
            lines.append(f"  {kind} with {sig['shared']['options']}: {tps} tokens/s, speed-up {r['speedup']}x"
                         + (f"; max abs diff to plain {sig['shared'].get('scoring_vs_plain_max_abs')}"
                            if kind.startswith("scoring") else ""))
    if _get(sig, "shared", "error"):
        lines.append(f"  shared-prefix signals FAILED: {sig['shared']['error']}")
    for name in ("study_tiny", "study_qwen", "study_ray"):
        r = p.get(name)
        if r and r.get("skipped"):
            lines.append(f"{name}: skipped ({r['skipped']})")
        elif r and "stage_seconds" in r:
            lines.append(f"{name}: {'ok' if r.get('ok') else 'FAILED'}, stages {r['stage_seconds']}, "
                         f"students on {r.get('student_devices')}, wall {r.get('wall_seconds')} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/gpu_check_out",
                    help="where gpu_check.json and gpu_check.log go (default: $OUT, else /tmp/gpu_check_out)")
    ap.add_argument("--work", default=None, help="scratch for models and study runs (default: a new /tmp dir)")
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="whole-run time budget (s)")
    ap.add_argument("--limit-scale", type=float, default=None, help="multiply every part's own limit")
    ap.add_argument("--parts", nargs="+", default=None, help=f"subset, in order (default: {' '.join(PARTS)})")
    ap.add_argument("--cpu-smoke", action="store_true", help="every part on the CPU at small shapes")
    ap.add_argument("--in-process", action="store_true", help="run the parts in this process (no timeouts)")
    ap.add_argument("--keep-work", action="store_true", help="keep the default scratch directory (models, runs)")
    ap.add_argument("--min-part-s", type=float, default=15, help="skip a part given less than this (s)")
    ap.add_argument("--part", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.part:
        return run_part_here(args.part, args, Path(args.result))
    own_work = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="gpu_check_work_")
    try:
        report = run_all(args)
    finally:
        if own_work and not args.keep_work:
            shutil.rmtree(args.work, ignore_errors=True)
    return 0 if all(v.get("ok") for v in report["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
