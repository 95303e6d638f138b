"""The study config's `metrics` section: how the attacks' results are measured (bootstrap resamples and seed).

Beside leakaudit.metrics; validated with the rest of the study config by leakaudit.config (which re-exports it).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import StrictInt

from leakaudit.config_section import FORBID
from leakaudit.errors import ConfigError


@dataclass
class MetricsConfig:
    __pydantic_config__ = FORBID

    n_boot: int = 1000
    """Bootstrap resamples for AUROC confidence intervals."""
    seed: StrictInt = 0
    """Bootstrap seed (>= 0). Fixed rather than derived from the master `seed`, so a new study seed changes the
    experiment but not how it is measured."""

    def __post_init__(self) -> None:
        if self.n_boot < 0:
            raise ConfigError(f"metrics.n_boot: must be >= 0, got {self.n_boot}")
        if self.seed < 0:
            raise ConfigError(f"metrics.seed: must be >= 0, got {self.seed}")
