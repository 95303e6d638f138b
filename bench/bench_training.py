"""Benchmark: OPD training throughput of shadow_models.train_student (seconds per step, completion tokens / s).

Grid: fp32 vs bf16 autocast x full fine-tuning vs LoRA (r=16); each trains batch x new-tokens steps on synthetic math
records through the real train_student (sampling + teacher scoring + update, self-distillation), discarding the
first `--warmup` steps. Prints a table and writes bench/results/training.json (bench/benchlib.py's schema: the
machine record includes the load average, since the machine may be shared).

    python bench/bench_training.py                      # smollm2-135m, batch 8 x 64 new tokens, 1 warm-up + 2 steps
    python bench/bench_training.py --model /path/to/tiny --steps 1
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import benchlib

GRID = [("fp32", False, 0), ("bf16", True, 0), ("fp32", False, 16), ("bf16", True, 16)]


def synthetic_records(n: int):
    from leakaudit.data.records import Record

    return [Record("math", f"What is {a} * {a + 3} + {a % 7}? Explain briefly.",
                   f"{a} * {a + 3} = {a * (a + 3)}; adding {a % 7} gives {a * (a + 3) + a % 7}.",
                   answer=str(a * (a + 3) + a % 7), source="bench") for a in range(2, 2 + n)]


def run_one(model: str, records, cfg, work: Path, warmup: int) -> dict:
    from shadow_models import train_student

    out = work / f"s_{int(cfg.bf16_autocast)}_{cfg.lora_rank}"
    t0 = time.time()
    train_student(model, records, out, cfg, model_id=out.name, progress=False)
    wall = time.time() - t0
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()][warmup:]
    secs = [e["seconds"] for e in ledger]
    toks = [e["completion_tokens"] for e in ledger]
    shutil.rmtree(out)
    return {"sec_per_step": statistics.mean(secs), "sec_per_step_all": secs,
            "tokens_per_s": sum(toks) / sum(secs), "completion_tokens": toks, "run_wall_s": round(wall, 2)}


def main() -> None:
    import torch

    from shadow_models import OPDConfig

    ap = benchlib.parser("training", __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2, help="measured steps per setting")
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    benchlib.apply_threads(args)

    n_steps = args.warmup + args.steps
    records = synthetic_records(args.batch * n_steps)
    base = OPDConfig(batch_size=args.batch, epochs=1, max_new_tokens=args.new_tokens, learning_rate=1e-5,
                     loss="sampled_rkl", seed=0)
    rows = []
    load_before = benchlib.load_average()
    with tempfile.TemporaryDirectory(prefix="bench_training_") as tmp:
        for precision, bf16, rank in GRID:
            cfg = replace(base, bf16_autocast=bf16, lora_rank=rank, lora_alpha=2 * max(rank, 1))
            res = run_one(args.model, records, cfg, Path(tmp), args.warmup)
            row = {"precision": precision, "mode": f"lora r={rank}" if rank else "full", **res}
            rows.append(row)
            print(f"{precision:5s} {row['mode']:10s} {res['sec_per_step']:7.2f} s/step "
                  f"{res['tokens_per_s']:7.1f} tok/s", flush=True)

    header = f"{'precision':9s} | {'mode':10s} | {'s/step':>7s} | {'completion tok/s':>16s}"
    print("\n" + header + "\n" + "-" * len(header))
    for r in rows:
        print(f"{r['precision']:9s} | {r['mode']:10s} | {r['sec_per_step']:7.2f} | {r['tokens_per_s']:16.1f}")
    benchlib.write_result(args.out, "training", params=vars(args),
                          metrics={"loss": base.loss, "torch_threads": torch.get_num_threads(), "rows": rows},
                          load_before=load_before)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
