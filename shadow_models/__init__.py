"""Shadow students: on-policy distillation with a privileged teacher (TRL loss helpers, PEFT, accelerate).

    from shadow_models import OPDConfig, train_student
    train_student(base_model, records, out_dir, OPDConfig(...), teacher_model=None, model_id="m0")

and a teacher that actually reads its privileged context:

    from shadow_models import TeacherPrepConfig, prepare_teacher
    teacher_dir = prepare_teacher(base_model, population_records, out_dir, TeacherPrepConfig())
"""

from shadow_models.config import LOSSES, OPDConfig, TeacherPrepConfig
from shadow_models.teacher_prep import prepare_teacher
from shadow_models.trainer import train_student

__all__ = ["LOSSES", "OPDConfig", "TeacherPrepConfig", "prepare_teacher", "train_student"]
