"""The study's jobs, as an executor runs them (leakaudit.executors): module-level functions of plain data.

Each job rebuilds the Study from the resolved config (a dict; out_root absolute) and reads what it needs from the
run directory the earlier stages wrote (records.jsonl, the plan, trained models), then calls the one Study method
that does the work, so a job in this process and one on a Ray worker run the same code on the same inputs. Each
returns its id; its outputs are the files it writes (DONE markers last, leakaudit.io).
"""

from __future__ import annotations

from typing import Any

from leakaudit.executors import JobContext


def _study(ctx: JobContext, config: dict[str, Any], progress: bool):
    from leakaudit.config import validate_config
    from leakaudit.study import Study

    return Study(validate_config(config), progress=progress, log=ctx.log)


def train_student_job(ctx: JobContext, config: dict[str, Any], model_id: str, progress: bool = False) -> str:
    """Train one student into models/<model_id>/ (staged in models/<model_id>.partial, DONE last)."""
    # the per-step hook only when a fault is injected: stand-ins for train_student (tests) need not accept it
    hook = (lambda entry: ctx.checkpoint("step")) if ctx.fault else None
    _study(ctx, config, progress).train_one(model_id, step_hook=hook)
    return model_id


def sample_job(ctx: JobContext, config: dict[str, Any], target: str, progress: bool = False) -> str:
    """Sample one target's fresh trajectories into signals/fresh/<target>/."""
    _study(ctx, config, progress).sample_one(target)
    return target


def score_job(ctx: JobContext, config: dict[str, Any], model_id: str, fixed: bool, fresh: list,
              progress: bool = False) -> str:
    """One model's scores: its fixed texts (signals/fixed/<model_id>.npz) and the trajectories of `fresh`."""
    _study(ctx, config, progress).score_one(model_id, fixed, fresh)
    return model_id
