"""What every signal backend shares: the sampling settings, the scores of one continuation, the Backend protocol and
the input check. A module of its own so the backends (hf_backend, vllm_backend) and their factory
(leakaudit.signals.backend) import one way.

Shapes: P prompts, n trajectories per prompt, T tokens (ragged, per sequence), V vocabulary size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from leakaudit.config_section import FORBID
from leakaudit.errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig:
    """How fresh trajectories are drawn from a target student."""

    __pydantic_config__ = FORBID  # not a field: leakaudit.config validates study configs with it

    n_per_record: int = 4
    """Trajectories per prompt (>= 1)."""
    temperature: float = 1.0
    """Softmax temperature (> 0); 1.0 samples the model's own distribution."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]; 1.0 disables nucleus filtering."""
    max_new_tokens: int = 128
    """Upper bound on completion length (>= 1); a completion stops earlier at EOS (kept)."""
    seed: int | None = None
    """Sampling seed (>= 0). Trajectory j of a prompt is a function of (seed, prompt ids, j) only. None = not
    chosen yet: a study derives it per target from its master seed; sampling refuses None (sampler.row_seed)."""
    batch_size: int = 16
    """Sequences decoded together (>= 1); does not change the sampled tokens (see the backend's notes)."""

    def __post_init__(self) -> None:
        if not isinstance(self.n_per_record, int) or self.n_per_record < 1:
            raise ConfigError(f"n_per_record must be an integer >= 1, got {self.n_per_record!r}")
        if not self.temperature > 0 or not np.isfinite(self.temperature):
            raise ConfigError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0):
            raise ConfigError(f"seed must be an integer >= 0 or None, got {self.seed!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TokenScores:
    """Teacher-forced scores of one continuation of length T.

    logp: float32 [T], logp[t] = log p(cont[t] | prefix + cont[:t]).
    mu, sigma: float32 [T] or None; Min-K%++'s statistics of the next-token distribution at t:
        mu[t] = E_{z~p}[log p(z)], sigma[t] = sqrt(E_{z~p}[(log p(z) - mu[t])^2]), z over the whole vocabulary.
    """

    logp: np.ndarray
    mu: np.ndarray | None = None
    sigma: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "logp", np.asarray(self.logp, dtype=np.float32))
        for name in ("mu", "sigma"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, dtype=np.float32)
                if value.shape != self.logp.shape:
                    raise ValueError(f"{name} shape {value.shape} != logp shape {self.logp.shape}")
                object.__setattr__(self, name, value)


@runtime_checkable
class Backend(Protocol):
    """A model that can sample completions and score continuations (see docs/contracts.md, "Signals")."""

    def sample(self, prompts: list[list[int]], cfg: SamplingConfig) -> list[list[list[int]]]:
        """[P][n] completion ids: EOS kept when generated, nothing after it, no padding."""
        ...

    def score(self, prefixes: list[list[int]], continuations: list[list[int]], *,
              vocab_stats: bool = False) -> list[TokenScores]:
        """One TokenScores per (prefix, continuation) pair; mu/sigma filled only when vocab_stats."""
        ...


def check_score_inputs(prefixes: list[list[int]], continuations: list[list[int]]) -> None:
    """Raise ValueError unless there is one non-empty prefix per continuation."""
    if len(prefixes) != len(continuations):
        raise ValueError(f"{len(prefixes)} prefixes but {len(continuations)} continuations")
    for i, prefix in enumerate(prefixes):
        if len(prefix) == 0:
            raise ValueError(f"prefix {i} is empty: the first continuation token needs a context")
