"""Train one student under `accelerate launch` (or plain python) on a fixed set of records: the multi-process check.

    accelerate launch --cpu --num_processes 2 -m shadow_models.launch_check --base DIR --out DIR [--kill RANK:STEP]
    python -m shadow_models.launch_check --base DIR --out DIR          # the single-process reference

The recipe is the `tiny` preset's training section with rollout_seeding 'record', so every process count draws the
same rollouts from the same seed and global batch, micro-batches of 1 and a checkpoint after every step; records are
the tiny preset's source (champ). On a machine without a GPU launch with `--multi_gpu` (torchrun: the trainer's
Accelerator then joins the processes over gloo); `accelerate launch --cpu --num_processes 2` starts ONE process
unless MPI is installed and configured (accelerate's simple launcher). `--kill RANK:STEP`
makes that rank SIGKILL itself after writing step STEP (0-based), the crash a rerun must resume from (checkpoints
every step). `--audit-writes FILE`: every process but rank 0 records each file it opens for writing, creates,
renames or removes under the output's parent into FILE.<rank>.json (Python audit events; what only rank 0 may do).
`--teacher` prepares the teacher the same way instead (shadow_models.prepare_teacher: no checkpoints; a killed
preparation is redone from scratch). Used by tests/test_multiprocess.py and bench/gpu_check.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

WRITE_EVENTS = ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree", "shutil.move")


def _audit_writes(root: Path, report: Path) -> None:
    """Record, on this process, every write-like filesystem event under `root`; the list is written at exit."""
    import atexit

    seen: list[list[str]] = []
    root_s = str(root)

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args and isinstance(args[0], (str, os.PathLike)):
            mode = str(args[1]) if len(args) > 1 and args[1] is not None else "r"
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            if writes and str(args[0]).startswith(root_s):
                seen.append([event, str(args[0])])
        elif event in WRITE_EVENTS and args and str(args[0]).startswith(root_s):
            seen.append([event, str(args[0])])

    sys.addaudithook(hook)
    atexit.register(lambda: report.write_text(json.dumps(seen)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="student initialisation (a local model directory)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--n-records", type=int, default=7)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=3,
                    help="global, split over the processes: 7 records in batches of 3 on 2 processes give uneven "
                         "halves (2 + 1) and a last step where one process has no record")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kill", default=None, help="RANK:STEP: that rank kills itself after that step")
    ap.add_argument("--audit-writes", type=Path, default=None)
    ap.add_argument("--rollout-seeding", default="record", help="training.rollout_seeding ('step' is refused under "
                                                                 "several processes)")
    ap.add_argument("--teacher", action="store_true",
                    help="prepare the teacher (the tiny preset's teacher.prep, SFT to copy the context) instead")
    a = ap.parse_args(argv)

    rank = int(os.environ.get("RANK", "0"))
    if a.audit_writes is not None and rank != 0:
        _audit_writes(a.out.resolve().parent, Path(f"{a.audit_writes}.{rank}.json"))

    from leakaudit.config import load_config
    from leakaudit.data.sources import load_source
    from shadow_models import train_student

    preset = load_config(preset="tiny")
    (domain, spec), = preset.data.domains.items()
    records = load_source(spec.source, limit=a.n_records, seed=a.seed, **spec.options)
    if a.teacher:
        from shadow_models import prepare_teacher

        prep = dataclasses.replace(preset.teacher.prep, seed=a.seed, epochs=a.epochs, batch_size=a.batch_size,
                                   micro_batch_size=1, max_length=256, bf16_autocast=False)
        prepare_teacher(a.base, records, a.out, prep, progress=False)
        return 0
    config = dataclasses.replace(preset.training, seed=a.seed, rollout_seeding=a.rollout_seeding, epochs=a.epochs,
                                 batch_size=a.batch_size, micro_batch_size=1, save_checkpoints=True,
                                 checkpoint_every=1)
    hook = None
    if a.kill:
        kill_rank, kill_step = (int(x) for x in a.kill.split(":"))

        def hook(entry: dict) -> None:
            if rank == kill_rank and entry["step"] == kill_step:
                os.kill(os.getpid(), signal.SIGKILL)

    train_student(a.base, records, a.out, config, model_id=f"{domain}-mp", progress=False, step_hook=hook)
    return 0


if __name__ == "__main__":
    sys.exit(main())
