"""`rmia`: Robust Membership Inference Attack, pairwise likelihood ratios against population records.

Zarifzadeh, Liu, Lee, Shokri 2024, "Low-Cost High-Power Membership Inference Attacks" (ICML 2024),
https://arxiv.org/abs/2312.03262; reference code privacytrustlab/ml_privacy_meter (`run_rmia`).

Sequence probability (explicit): pr(x|theta) = exp(mean_t log p_theta(x_t)), the geometric mean of the token
probabilities of the record's reference text. The product over T tokens would underflow and make texts of
different lengths incomparable. Population records use the same quantity (population_target,
population_refs hold mean log-probs already).

Shapes: fixed_target[i] [T]; fixed_refs[i] [R2, T]; fixed_ref_in[i] [R2] bool; population_target [Z];
population_refs [Z, R3] (population records are OUT for every reference).
    online:  pr(x) = (mean_IN pr(x|ref) + mean_OUT pr(x|ref)) / 2    (balanced, as the reference code)
             pr(z) = mean_r pr(z|ref_r)
    offline: pr(x) = ((1 + a) * mean_OUT pr(x|ref) + (1 - a)) / 2, and the same formula for pr(z)
    LR(x, z) = (pr(x|target) / pr(x)) / (pr(z|target) / pr(z))
    score_x  = fraction of population z with LR(x, z) > gamma      (in [0, 1])
Computed in log space (scipy.special.logsumexp for the means of probabilities) so that very unlikely texts do
not underflow. NaN when T == 0. Sign: a member is more likely under the target than under references,
relative to population records, member-high.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from attacks._aggregate import ref_means, seq_mean_logp
from attacks.base import AttackInputs, check_bool, check_range
from attacks.registry import register
from leakaudit.errors import InputError


@dataclass(frozen=True)
class RmiaParams:
    """Parameters of `rmia`."""

    offline: bool = False
    """Use OUT references only, with pr(x) approximated from pr_OUT(x) through `a`."""
    a: float = 0.3
    """Offline coefficient in [0, 1] (ignored online): how far pr_IN exceeds pr_OUT; tune it on references."""
    gamma: float = 1.0
    """A population record z counts against x when LR(x, z) > gamma; > 0 (the reference code uses 1)."""

    def __post_init__(self) -> None:
        check_bool("rmia.offline", self.offline)
        check_range("rmia.a", self.a, 0.0, 1.0)
        check_range("rmia.gamma", self.gamma, 0.0, None, lo_open=True)


def _log_mean_prob(log_probs: np.ndarray, axis: int = -1) -> np.ndarray:
    """log mean_r exp(log_probs) along `axis`."""
    return logsumexp(log_probs, axis=axis) - np.log(log_probs.shape[axis])


def _offline_log_prior(log_p_out: np.ndarray, a: float) -> np.ndarray:
    """log(((1 + a) * p_out + (1 - a)) / 2), -inf-safe for a == 1."""
    with np.errstate(divide="ignore"):
        return np.logaddexp(np.log1p(a) + log_p_out, np.log1p(-a)) - np.log(2.0)


@register("rmia", RmiaParams,
          needs=("fixed_target", "fixed_refs", "fixed_ref_in", "population_target", "population_refs"),
          family="fixed", description="RMIA: fraction of population records z with LR(x, z) > gamma")
def rmia(inputs: AttackInputs, params: RmiaParams) -> np.ndarray:
    log_target_x = np.array([seq_mean_logp(t) for t in inputs.fixed_target], dtype=np.float64)
    log_prior_x = np.empty(inputs.n)
    for i in range(inputs.n):
        s_in, s_out = ref_means(inputs.fixed_refs[i], np.asarray(inputs.fixed_ref_in[i]))
        if s_out.size == 0 or (not params.offline and s_in.size == 0):
            kind = "OUT" if s_out.size == 0 else "IN"
            raise InputError(f"rmia ({'offline' if params.offline else 'online'}) needs at least one {kind} "
                             "reference per record; this one has none",
                             record_id=str(inputs.record_ids[i]), field="fixed_ref_in")
        if np.isnan(log_target_x[i]):  # no tokens: NaN score, nothing to compute
            log_prior_x[i] = np.nan
        elif params.offline:
            log_prior_x[i] = _offline_log_prior(_log_mean_prob(s_out), params.a)
        else:
            log_prior_x[i] = np.logaddexp(_log_mean_prob(s_in), _log_mean_prob(s_out)) - np.log(2.0)
    pop_refs = np.asarray(inputs.population_refs, dtype=np.float64)
    log_prior_z = _log_mean_prob(pop_refs, axis=1)
    if params.offline:
        log_prior_z = _offline_log_prior(log_prior_z, params.a)
    log_ratio_x = log_target_x - log_prior_x                                          # [N]
    log_ratio_z = np.asarray(inputs.population_target, dtype=np.float64) - log_prior_z  # [Z]
    wins = (log_ratio_x[:, None] - log_ratio_z[None, :]) > np.log(params.gamma)        # [N, Z]
    score = wins.mean(axis=1)
    score[np.isnan(log_ratio_x)] = np.nan
    return score
