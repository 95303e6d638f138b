"""`min_k`: mean of the lowest k% token log-probs of the reference text under the target.

Shi et al. 2023, "Detecting Pretraining Data from Large Language Models", https://arxiv.org/abs/2310.16789.

Shapes: fixed_target[i] [T]. score_i = mean of the lowest max(1, floor(k*T)) values of log p_target(x_t);
NaN when T == 0. Sign: members have fewer very unlikely tokens, so the mean of the lowest log-probs is
member-high. (The paper's code returns its negation, -mean, with lower = member.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks._aggregate import lowest_mean
from attacks.base import AttackInputs, check_range
from attacks.registry import register


@dataclass(frozen=True)
class MinKParams:
    """Parameters of `min_k`."""

    k: float = 0.2
    """Fraction of lowest-log-prob tokens averaged, in (0, 1]; 0.2 is the paper's recommended value."""

    def __post_init__(self) -> None:
        check_range("min_k.k", self.k, 0.0, 1.0, lo_open=True)


@register("min_k", MinKParams, needs=("fixed_target",), family="fixed",
          description="mean of the lowest k% token log-probs of the reference text (Min-K%)")
def min_k(inputs: AttackInputs, params: MinKParams) -> np.ndarray:
    return np.array([lowest_mean(x.astype(np.float64), params.k) for x in inputs.fixed_target], dtype=np.float64)
