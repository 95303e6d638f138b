"""The pipeline's jobs, as an executor runs them (leakaudit.executors): module-level functions of plain data.

Each job gets the executor's JobContext (its id, log, fault points) and the run's context as plain data (`run`:
leakaudit.pipeline.context.RunContext.job_args), rebuilds that small context (config, run directory, given
targets) and reads what it needs from the run directory the earlier stages wrote (records.jsonl, the plan, trained
models), so a job in this process and one on a Ray worker run the same code on the same inputs. Each returns its
id; its outputs are the files it writes (DONE markers last, leakaudit.io).
"""

from __future__ import annotations

from typing import Any

from leakaudit.executors import JobContext
from leakaudit.pipeline import signals_stage, training
from leakaudit.pipeline.context import RunContext


def _context(job: JobContext, run: dict[str, Any]) -> RunContext:
    return RunContext.from_job_args(run, log=job.log)


def train_student_job(job: JobContext, run: dict[str, Any], model_id: str) -> str:
    """Train one model into models/<model_id>/ (staged in models/<model_id>.partial, DONE last)."""
    # the per-step hook only when a fault is injected: stand-ins for train_student (tests) need not accept it
    hook = (lambda entry: job.checkpoint("step")) if job.fault else None
    training.train_one(_context(job, run), model_id, step_hook=hook)
    return model_id


def sample_job(job: JobContext, run: dict[str, Any], target: str) -> str:
    """Sample one target's fresh trajectories into signals/fresh/<target>/."""
    signals_stage.sample_one(_context(job, run), target)
    return target


def score_job(job: JobContext, run: dict[str, Any], model_id: str, fixed: bool, fresh: list) -> str:
    """One model's scores: its fixed texts (signals/fixed/<model_id>.npz) and the trajectories of `fresh`."""
    signals_stage.score_one(_context(job, run), model_id, fixed, fresh)
    return model_id
