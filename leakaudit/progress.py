"""Where a long study stands: per stage, jobs done / running / failed, and for training each running student's
current step and latest teacher KL, read from its ledger (whichever executor runs the jobs).

Two parts with one job each: `student_statuses` reads the run directory into a status table (tested with golden
values); `StageProgress` draws it in the terminal as one tqdm bar per stage (tqdm is already a dependency).
A student is 'done' when models/<id>/DONE exists, 'running' while its staging directory models/<id>.partial holds
a ledger (shadow_models.train_student appends one line per step there), else 'waiting'. A staging ledger last written
before `since` (the stage's start) is a killed run's leftover, which the student's job deletes when it starts: that
student is 'waiting' until then, not 'running' at the dead run's step. With Ray, 'running' in a stage's counts means
submitted and not finished (running, or waiting for a free GPU/CPU).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from tqdm.auto import tqdm

from leakaudit.io import is_done, partial_dir
from leakaudit.rundir import RunDir


@dataclass(frozen=True)
class StudentStatus:
    model_id: str
    state: str
    """'done' | 'running' | 'waiting'."""
    steps_done: int
    """Ledger lines (steps finished) so far."""
    n_steps: int | None
    """Total steps when the caller knows them, else None."""
    teacher_kl: float | None
    """The latest step's teacher KL (nats/token), None before the first step."""


def read_ledger(path: Path) -> tuple[int, dict | None]:
    """(complete lines, last complete entry) of a ledger.jsonl being appended to; a half-written last line (the
    trainer is mid-write) is not counted."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return 0, None
    n, last = 0, None
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            last = json.loads(line)
        except ValueError:
            break
        n += 1
    return n, last


def student_statuses(run: RunDir, model_ids: Sequence[str], n_steps: dict[str, int] | None = None,
                     since: float | None = None) -> list[StudentStatus]:
    """One row per model id, in the order given. `since` (a time.time() value, e.g. the stage's start): staging
    ledgers last modified before it are ignored (a killed run's leftovers)."""
    rows = []
    for m in model_ids:
        final = run.model(m)
        staged = partial_dir(final) / "ledger.jsonl"
        if is_done(final):
            state, ledger = "done", final / "ledger.jsonl"
        elif staged.is_file() and (since is None or _mtime(staged) >= since):
            state, ledger = "running", staged
        else:
            state, ledger = "waiting", None
        count, last = read_ledger(ledger) if ledger is not None else (0, None)
        kl = last.get("teacher_kl") if last else None
        rows.append(StudentStatus(m, state, count, (n_steps or {}).get(m), None if kl is None else float(kl)))
    return rows


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # deleted between the check and here: the job just restarted it
        return float("-inf")


def running_line(rows: Sequence[StudentStatus]) -> str:
    """'math-s0 step 3/8 KL 0.412 | math-s1 step 1/8 KL -' for the running students."""
    parts = []
    for r in rows:
        if r.state != "running":
            continue
        total = f"/{r.n_steps}" if r.n_steps is not None else ""
        kl = f"{r.teacher_kl:.3f}" if r.teacher_kl is not None else "-"
        parts.append(f"{r.model_id} step {r.steps_done}{total} KL {kl}")
    return " | ".join(parts)


class StageProgress:
    """A tqdm bar for one stage: jobs done of total, running and failed counts, and `detail()` (e.g. the running
    students' steps and KL) refreshed on every update. Disabled = draws nothing."""

    def __init__(self, stage: str, total: int, *, detail: Callable[[], str] | None = None, enabled: bool = True):
        self.detail = detail
        self.bar = tqdm(total=total, desc=stage, unit="job", disable=not enabled)
        self.last: tuple[int, int, int] = (0, 0, 0)

    def update(self, done: int, running: int, failed: int) -> None:
        self.last = (done, running, failed)
        self.bar.n = done + failed
        text = f"running {running} failed {failed}"
        extra = self.detail() if self.detail is not None and not self.bar.disable else ""
        self.bar.set_postfix_str(f"{text} | {extra}" if extra else text, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "StageProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
