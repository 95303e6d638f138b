"""The study config's `plan` section: how many students a domain has and how the membership plan is drawn.

Beside leakaudit.membership, whose checks (check_n_students) it calls; validated with the rest of the study config by
leakaudit.config (which re-exports it).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import StrictBool

from leakaudit.config_section import FORBID
from leakaudit.errors import ConfigError


@dataclass
class PlanConfig:
    __pydantic_config__ = FORBID

    n_students: int = 4
    """Students per domain (even). Each is a target in turn; its matched references are the others."""
    null_student: StrictBool = True
    """Also train a student on population records only: the built-in null check (AUROC must be ≈ 0.5)."""
    n_null_students: int = 1
    """With null_student: null students per domain (1 to n_students), each trained on its own n_candidates/2
    population records and attacked with another student's labels, so the null check pools that many draws (one
    null target of 12 + 12 candidates: AUROC sd 0.12 under no signal, and its CI excludes 0.5 in 5.5% of
    no-signal draws; experiments/null_check_calibration.py). Each costs one student's training."""
    n_matched_references: int = 0
    """References per record for Leaky (OUT) and LiRA-online (IN); 0 = the most every record allows,
    n_students/2 - 1, fixed so the count never depends on membership."""
    keep_design: str = "lira"
    """'lira' (random balanced halves) or 'balanced_subsets' (every IN-set of size n_students/2 equally often,
    so that which student is a record's matched reference does not depend on its label; see
    leakaudit.membership.balanced_subsets_keep_matrix). With 4 students 'lira' confounds reference identity
    with membership (experiments/reference_confound.py)."""

    n_offline_references: int = 0
    """The offline design beside the keep matrix: this many reference students per domain trained on the background
    plus reference-only records (data.n_reference_records), never on a candidate, so each serves every candidate of
    every target. Every target is then attacked twice: with its matched references, and with the offline ones
    (attack labels ending '@offline'; online attacks replaced by their offline forms). 0 = none."""

    def __post_init__(self) -> None:
        if self.n_offline_references < 0:
            raise ConfigError(f"plan.n_offline_references: must be >= 0, got {self.n_offline_references}")
        from leakaudit.membership import check_n_students  # here: membership's module imports stay config-free

        check_n_students(self.n_students)
        if not 0 <= self.n_matched_references <= self.n_students // 2 - 1 and self.n_matched_references:
            raise ConfigError(f"plan.n_matched_references: must be in [1, n_students/2 - 1 = "
                              f"{self.n_students // 2 - 1}] or 0, got {self.n_matched_references}")
        if self.null_student and not 1 <= self.n_null_students <= self.n_students:
            raise ConfigError(f"plan.n_null_students: must be in [1, n_students = {self.n_students}] (each takes "
                              f"its labels from another student), got {self.n_null_students}")
        if self.keep_design not in ("lira", "balanced_subsets"):
            raise ConfigError(f"plan.keep_design: must be 'lira' or 'balanced_subsets', got {self.keep_design!r}")
