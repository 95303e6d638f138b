"""Benchmark: peak resident memory and time of one teacher-SFT step by micro-batch size.

One step of `shadow_models.teacher_prep.accumulate_sft_step` (bf16 autocast, fp32 weights, as prepare_teacher runs
it) on the `--batch` longest code records (teacher prompt + reference, cut at 1024 tokens), each micro-batch size
in a fresh subprocess so that ru_maxrss is that configuration's own high-water mark. The one-pass row
(micro = batch) is what prepare_teacher did before micro-batching; the default preset's teacher used to peak at
~21 GB resident on this 24 GB machine.

    python bench/bench_teacher_memory.py                 # smollm2-135m, batch 8, micro 8 / 4 / 2 / 1
Writes bench/results/teacher_memory.json (bench/benchlib.py's schema; --out elsewhere).

Each row also says what stays resident once the step is over (the driver's case: it prepares the teacher, then
waits on Ray workers): after the step, after freeing the model, and after leakaudit.memory.release_freed_memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import benchlib


def one(model_ref: str, batch: int, micro: int) -> dict:
    """Runs in the child: load, one accumulated step, report peak RSS (MB) and seconds."""
    import gc

    import torch
    from accelerate import Accelerator

    from leakaudit.data.sources import load_source
    from leakaudit.memory import release_freed_memory, resident_mb
    from leakaudit.models import LoadOptions, load_model, load_tokenizer
    from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE
    from shadow_models.teacher_prep import accumulate_sft_step, sft_example

    tok = load_tokenizer(model_ref)
    examples = [sft_example(tok, r, DEFAULT_TEACHER_TEMPLATE, 1024) for r in load_source("humaneval")]
    examples = sorted(examples, key=lambda e: -len(e[0]))[:batch]
    model = load_model(model_ref, LoadOptions(dtype="float32", device="cpu"))
    model.train()
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    amp = torch.autocast("cpu", dtype=torch.bfloat16)
    t0 = time.time()
    loss = accumulate_sft_step(Accelerator(), model, examples, int(tok.pad_token_id), "cpu", amp, micro)
    seconds = round(time.time() - t0, 2)
    # what a driver keeps once the step is over: resident after the step, after dropping the model and optimiser
    # state (as prepare_teacher's return does), and after leakaudit.memory.release_freed_memory (malloc_trim)
    rss_after_step = resident_mb()
    del model
    gc.collect()
    rss_after_free = resident_mb()
    trimmed = release_freed_memory()
    return {"micro_batch_size": micro, "batch": batch, "seq_lengths": [len(e[0]) for e in examples],
            "loss": round(loss, 5), "seconds": seconds,
            "peak_rss_mb_after_load": round(rss_loaded), "peak_rss_mb": round(resource.getrusage(
                resource.RUSAGE_SELF).ru_maxrss / 1024),
            "rss_mb_after_step": round(rss_after_step), "rss_mb_after_free": round(rss_after_free),
            "rss_mb_after_trim": round(resident_mb()), "trim_released": trimmed}


def main() -> None:
    ap = benchlib.parser("teacher_memory", __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro", type=int, nargs="+", default=[8, 4, 2, 1])
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    benchlib.apply_threads(args)
    if args.child is not None:
        print(json.dumps(one(args.model, args.batch, args.child)))
        return
    load = benchlib.load_average()
    threads = ["--threads", str(args.threads)] if args.threads is not None else []
    rows = []
    for micro in args.micro:
        proc = subprocess.run([sys.executable, __file__, "--model", args.model, "--batch", str(args.batch),
                               "--child", str(micro), *threads], capture_output=True, text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"micro {micro}: peak RSS {r['peak_rss_mb']} MB (after load {r['peak_rss_mb_after_load']}), "
              f"{r['seconds']} s, loss {r['loss']}; resident after the step {r['rss_mb_after_step']} MB, "
              f"model freed {r['rss_mb_after_free']} MB, trimmed {r['rss_mb_after_trim']} MB", flush=True)
    benchlib.write_result(args.out, "teacher_memory", params=vars(args), metrics={"rows": rows}, load_before=load)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
