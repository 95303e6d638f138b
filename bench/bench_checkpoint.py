"""Benchmark: what `training.save_checkpoints` costs a student, per checkpoint, on the real model.

A student keeps a resumable checkpoint every `training.checkpoint_every` steps (shadow_models.checkpoint: the trainable
weights and AdamW's two moments in safetensors, the ledger and optimizer groups in JSON, written through a staging
directory). This times `save_checkpoint` and `load_checkpoint` on smollm2-135m in fp32 with a fused AdamW whose state
is filled by one real update, and records the bytes written. Divide the save time by `checkpoint_every` times a
step's time (a student's ledger gives it) for the fraction a run pays; what it buys is that a stopped student loses at
most `checkpoint_every` steps instead of everything it had trained.

    python bench/bench_checkpoint.py               # smollm2-135m, 3 saves and 3 loads
Writes bench/results/checkpoint.json (bench/benchlib.py's schema; --out elsewhere).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import benchlib


def measure(model_ref: str, repeats: int) -> dict:
    import torch

    from leakaudit.models import LoadOptions, load_model
    from shadow_models import optim
    from leakaudit.io import checkpoint_dir
    from shadow_models.checkpoint import load_checkpoint, save_checkpoint

    model = load_model(model_ref, LoadOptions(dtype="float32", device="cpu"))
    model.train()
    optimizer, _ = optim.build_optimizer(model, learning_rate=1e-4, weight_decay=0.0, warmup_steps=0,
                                         schedule="constant", total_steps=10, fused=True)
    ids = torch.arange(1, 33).unsqueeze(0)
    model(input_ids=ids, labels=ids).loss.backward()  # one real update, so AdamW holds both moments
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    fingerprint = {"config": "bench", "records": list(range(56))}
    ledger = ['{"step": 0}\n'] * 50
    saves, loads = [], []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint_dir(Path(tmp) / "student")
        for i in range(repeats):
            t0 = time.perf_counter()
            save_checkpoint(ckpt, model=model, optimizer=optimizer, next_step=10 * (i + 1), fingerprint=fingerprint,
                            ledger_lines=ledger)
            saves.append(time.perf_counter() - t0)
        written = sum(p.stat().st_size for p in ckpt.iterdir())
        for _ in range(repeats):
            t0 = time.perf_counter()
            resumed = load_checkpoint(ckpt, model=model, optimizer=optimizer, fingerprint=fingerprint)
            loads.append(time.perf_counter() - t0)
            assert resumed is not None and resumed[0] == 10 * repeats
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable_parameters": n_params, "bytes_per_checkpoint": written,
            "save_seconds": [round(s, 3) for s in saves], "save_seconds_median": round(statistics.median(saves), 3),
            "load_seconds": [round(s, 3) for s in loads], "load_seconds_median": round(statistics.median(loads), 3)}


def main() -> None:
    ap = benchlib.parser("checkpoint", __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    benchlib.apply_threads(args)
    load = benchlib.load_average()
    metrics = measure(args.model, args.repeats)
    print(f"{metrics['bytes_per_checkpoint'] / 1e9:.2f} GB per checkpoint; save {metrics['save_seconds_median']} s, "
          f"load {metrics['load_seconds_median']} s (median of {args.repeats})", flush=True)
    benchlib.write_result(args.out, "checkpoint", params=vars(args), metrics=metrics, load_before=load)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
