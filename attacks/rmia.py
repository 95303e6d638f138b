"""`rmia`: Robust Membership Inference Attack, pairwise likelihood ratios against population records.

Zarifzadeh, Liu, Lee, Shokri 2024, "Low-Cost High-Power Membership Inference Attacks" (ICML 2024),
https://arxiv.org/abs/2312.03262; reference code privacytrustlab/ml_privacy_meter (`run_rmia`).

Sequence probability (explicit): pr(x|theta) = exp(mean_t log p_theta(x_t)), the geometric mean of the token
probabilities of the record's reference text. The product over T tokens would underflow and make texts of
different lengths incomparable. Population records use the same quantity (population_target,
population_refs hold mean log-probs already).

Shapes: fixed_target[i] [T]; fixed_refs[i] [R2, T]; fixed_ref_in[i] [R2] bool; fixed_ref_cols[i] [R2] int;
population_target [Z]; population_refs [Z, R3] (population records are OUT for every reference). Row r of
fixed_refs[i] is the reference model in column fixed_ref_cols[i][r] of population_refs.
For record x with IN models I_x and OUT models O_x (its fixed_refs rows, mapped to columns):
    online:  pr(x) = (mean_{I_x} pr(x|ref) + mean_{O_x} pr(x|ref)) / 2     (balanced, as the reference code)
             pr(z) = (mean_{I_x} pr(z|ref) + mean_{O_x} pr(z|ref)) / 2     (the same models, the same weights)
    offline: pr(x) = ((1 + a) * mean_{O_x} pr(x|ref) + (1 - a)) / 2     (the paper's offline setting: pr_IN
             pr(z) = ((1 + a) * mean_{O_x} pr(z|ref) + (1 - a)) / 2      approximated from pr_OUT; an audit, whose
                                                                         references are all OUT, runs it as
                                                                         rmia_offline)
    LR(x, z) = (pr(x|target) / pr(x)) / (pr(z|target) / pr(z))
    score_x  = fraction of population z with LR(x, z) > gamma      (in [0, 1])
Computed in log space (scipy.special.logsumexp for the means of probabilities) so that very unlikely texts do
not underflow. NaN when T == 0. Sign: a member is more likely under the target than under references,
relative to population records, member-high.

Why pr(z) uses x's own models. LR(x, z) is a ratio of two likelihood ratios; it cancels the reference models'
own offsets only when numerator and denominator are normalised by the same models. In this toolkit each record
is scored by its own k IN + k OUT matched references, while population_refs holds every reference student, and
students differ by large per-model offsets (see leakaudit.assemble.reference_balance): normalising x by its
models and z by all of them makes the score depend on which students x happened to get, not on membership. The
reference code does the same: privacytrustlab/ml_privacy_meter attacks.py `run_rmia` forms pr(x) and pr(z)
through one function, `get_rmia_out_signals`, over one set of columns (the reference models other than the
target and its pair, the first 2 * num_reference_models of them), with the same offline formula
`(1 + a) / 2 * mean_out + (1 - a) / 2` for both (modules/mia/attacks/rmia.py `run_rmia` likewise passes
ref_signals and z_ref_signals over the same reference models). There, population z being OUT of every model,
its sort-based masking keeps the num_reference_models LARGEST of those signals for z; here pr(z) uses exactly
x's models (its OUT models offline; its IN and OUT models online, weighted as in pr(x), z being OUT of all of
them), without the largest-k artefact. The paper averages pr(.|ref) over one set of reference models for
both x and z (online, half of them IN for x); with k IN and k OUT the balanced mean is that plain average,
and with unequal counts it keeps IN and OUT at equal weight on both sides of the ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from attacks._aggregate import ref_means, seq_mean_logp
from attacks.base import AttackInputs, check_bool, check_range
from attacks.registry import register
from attacks.errors import AttackInputError


@dataclass(frozen=True)
class RmiaParams:
    """Parameters of `rmia`."""

    offline: bool = False
    """Use OUT references only, with pr(x) approximated from pr_OUT(x) through `a`."""
    a: float = 0.3
    """Offline coefficient in [0, 1] (ignored online): how far pr_IN exceeds pr_OUT; tune it on references.
    0.3 is the reference code's default (privacytrustlab/ml_privacy_meter, modules/mia/attacks/rmia.py,
    get_out_ref_signals(offline_a=0.3)); the paper's CIFAR-10 offline configs use 0.33 (research/2023_rmia/
    attack_configs, offline_a), and the current reference code tunes it per target on a paired model
    (tune_offline_a, a in 0, 0.1, ..., 1 by AUC)."""
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
          needs=("fixed_target", "fixed_refs", "fixed_ref_in", "population_target", "population_refs",
                 "fixed_ref_cols"),
          family="fixed", description="RMIA: fraction of population records z with LR(x, z) > gamma",
          threat_model=lambda p: "OUT-only" if p.offline else "IN+OUT", offline_form=("rmia", {"offline": True}))
def rmia(inputs: AttackInputs, params: RmiaParams) -> np.ndarray:
    log_target_x = np.array([seq_mean_logp(t) for t in inputs.fixed_target], dtype=np.float64)
    pop_target = np.asarray(inputs.population_target, dtype=np.float64)             # [Z]
    pop_refs = np.asarray(inputs.population_refs, dtype=np.float64)                  # [Z, R3]
    score = np.full(inputs.n, np.nan)
    log_gamma = np.log(params.gamma)
    ratio_z_cache: dict[tuple[tuple[int, ...], tuple[int, ...]], np.ndarray] = {}
    for i in range(inputs.n):
        ref_in = np.asarray(inputs.fixed_ref_in[i])
        s_in, s_out = ref_means(inputs.fixed_refs[i], ref_in)
        if s_out.size == 0 or (not params.offline and s_in.size == 0):
            kind = "OUT" if s_out.size == 0 else "IN"
            raise AttackInputError(f"rmia ({'offline' if params.offline else 'online'}) needs at least one {kind} "
                             "reference per record; this one has none",
                             record_id=str(inputs.record_ids[i]), field="fixed_ref_in")
        if np.isnan(log_target_x[i]):  # no tokens: NaN score, nothing to compute
            continue
        cols = np.asarray(inputs.fixed_ref_cols[i])
        cols_in, cols_out = tuple(cols[ref_in].tolist()), tuple(cols[~ref_in].tolist())
        log_prior_x = _log_prior(s_in, s_out, params)
        key = ((), cols_out) if params.offline else (cols_in, cols_out)
        if key not in ratio_z_cache:  # records with the same reference models share pr(z)
            z_in, z_out = pop_refs[:, list(cols_in)], pop_refs[:, list(cols_out)]           # [Z, k], [Z, m]
            ratio_z_cache[key] = pop_target - _log_prior(z_in, z_out, params)                # [Z]
        log_ratio_x = log_target_x[i] - log_prior_x
        score[i] = np.mean((log_ratio_x - ratio_z_cache[key]) > log_gamma)
    return score


def _log_prior(s_in: np.ndarray, s_out: np.ndarray, params: RmiaParams) -> np.ndarray:
    """log pr(.) from mean log-probs under the IN and OUT models (last axis): balanced online, `a` offline."""
    if params.offline:
        return _offline_log_prior(_log_mean_prob(s_out), params.a)
    return np.logaddexp(_log_mean_prob(s_in), _log_mean_prob(s_out)) - np.log(2.0)
