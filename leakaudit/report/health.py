"""Training check: did each student move toward its teacher? Read from the students' training ledgers.

Each OPD step's ledger line holds ``teacher_kl``: the mean per-token KL(student || teacher) on that step's own
samples (nats/token, >= 0). A student that trained as intended ends with a lower KL than it started with. One
whose KL ends HIGHER has moved away from its teacher: seen here when a student collapsed into a degenerate,
nearly deterministic output (the null student of two default runs emitted only newlines, KL 1.26 -> 1.87, while
the sampled-token loss went to 0 — the per-token policy gradient vanishes once p_s(y) = 1 whatever the teacher
says). Attacks against such a student, and the null check when it is the null student, say little.
"""

from __future__ import annotations

from pathlib import Path

from leakaudit.data.records import jsonl_rows
from leakaudit.io import is_done, is_work_folder

LAST_STEPS = 3
"""The final KL is the mean over this many last steps (one step's KL is noisy)."""


def ledger_kl(path: Path) -> list[float]:
    """teacher_kl of every step in a ledger.jsonl, in step order; [] when no line carries it. A bad line is an
    InputError naming the file and line (`leakaudit.data.records.jsonl_rows`)."""
    rows = [(int(row.get("step", n - 1)), float(row["teacher_kl"]))
            for n, row in jsonl_rows(path) if row.get("teacher_kl") is not None]
    return [kl for _, kl in sorted(rows)]


def training_health(models_dir: Path) -> list[dict]:
    """One row per finished model under `models_dir` (DONE; the prepared teacher `_teacher` is skipped, and so are
    a training model's `.partial` staging and `.ckpt` checkpoint folders, which hold ledgers too) whose ledger
    records teacher_kl: {model_id, steps, kl_first, kl_min, kl_last (mean of the last LAST_STEPS),
    moved_toward_teacher: kl_last < kl_first}."""
    out = []
    if not models_dir.is_dir():
        return out
    for d in sorted(p for p in models_dir.iterdir()
                    if not p.name.startswith("_") and not is_work_folder(p) and is_done(p)):
        ledger = d / "ledger.jsonl"
        kls = ledger_kl(ledger) if ledger.is_file() else []
        if not kls:
            continue
        last = sum(kls[-LAST_STEPS:]) / len(kls[-LAST_STEPS:])
        out.append({"model_id": d.name, "steps": len(kls), "kl_first": round(kls[0], 4),
                    "kl_min": round(min(kls), 4), "kl_last": round(last, 4),
                    "moved_toward_teacher": bool(last < kls[0])})
    return out
