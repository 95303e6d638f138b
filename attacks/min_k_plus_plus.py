"""`min_k_plus_plus`: Min-K% over per-token log-probs standardised by the target's next-token distribution.

Zhang et al. 2024, "Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large Language Models",
https://arxiv.org/abs/2404.02936.

Shapes: fixed_target[i], fixed_target_mu[i], fixed_target_sigma[i], all [T].
    z_t     = (log p(x_t) - mu_t) / sigma_t      mu_t = E_{v~p(.|x<t)} log p(v), sigma_t its std
    score_i = mean of the lowest max(1, floor(k*T)) z_t;  NaN when T == 0
A position with sigma_t == 0 (a point-mass distribution, where log p(x_t) == mu_t up to rounding) gets
z_t = 0 instead of 0/0. Sign: members sit near local maxima of the likelihood (high z), member-high.
mu and sigma must be the expectation and std under the model's own next-token distribution (the paper's
definition), not a uniform average over the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks._aggregate import lowest_mean
from attacks.base import AttackInputs, check_range
from attacks.registry import register


@dataclass(frozen=True)
class MinKPlusPlusParams:
    """Parameters of `min_k_plus_plus`."""

    k: float = 0.2
    """Fraction of lowest standardised tokens averaged, in (0, 1]; the paper reports 0.2 as its default."""

    def __post_init__(self) -> None:
        check_range("min_k_plus_plus.k", self.k, 0.0, 1.0, lo_open=True)


def standardise(logp: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """(logp - mu) / sigma per token, 0 where sigma == 0."""
    num = logp.astype(np.float64) - mu.astype(np.float64)
    den = sigma.astype(np.float64)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


@register("min_k_plus_plus", MinKPlusPlusParams,
          needs=("fixed_target", "fixed_target_mu", "fixed_target_sigma"), family="fixed",
          description="Min-K% of (log p - mu) / sigma over the reference text (Min-K%++)")
def min_k_plus_plus(inputs: AttackInputs, params: MinKPlusPlusParams) -> np.ndarray:
    return np.array([lowest_mean(standardise(x, m, s), params.k)
                     for x, m, s in zip(inputs.fixed_target, inputs.fixed_target_mu, inputs.fixed_target_sigma)],
                    dtype=np.float64)
