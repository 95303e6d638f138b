"""Shadow students: on-policy distillation with a privileged teacher (TRL loss helpers, PEFT, accelerate).

    from shadow_models import OPDConfig, train_student
    train_student(base_model, records, out_dir, OPDConfig(...), teacher_model=None, model_id="m0")

and a teacher that actually reads its privileged context:

    from shadow_models import TeacherPrepConfig, prepare_teacher
    teacher_dir = prepare_teacher(base_model, population_records, out_dir, TeacherPrepConfig())
"""

from shadow_models.config import LOSSES, OPDConfig, TeacherPrepConfig

_LAZY = {"prepare_teacher": "shadow_models.teacher_prep", "train_student": "shadow_models.trainer"}


def __getattr__(name: str):
    """The trainers import torch, TRL and PEFT (seconds); load them on first use, so that reading a config
    (leakaudit.config imports shadow_models.config) and every CLI usage error stay fast."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shadow_models' has no attribute {name!r}")


__all__ = ["LOSSES", "OPDConfig", "TeacherPrepConfig", "prepare_teacher", "train_student"]
