"""`lira_online` and `lira_offline`: the Likelihood Ratio Attack with per-record Gaussians.

Carlini et al. 2022, "Membership Inference Attacks From First Principles", https://arxiv.org/abs/2112.03570;
reference code tensorflow/privacy research/mi_lira_2021 (plot.py, `generate_ours` / `generate_ours_offline`).

Statistic: the mean token log-prob of the record's reference text, s = mean_t log p(x_t). LiRA's logit
scaling exists because a classifier's confidence is bounded and piles up near 1; a mean of T token log-probs
is unbounded on (-inf, 0] and close to Gaussian across models already (a mean of many terms), so it is used
as is. (For a single-token text, mean log p = log p; the logit would be log p - log(1 - p).)

Shapes: fixed_target[i] [T]; fixed_refs[i] [R2, T]; fixed_ref_in[i] [R2] bool.
    s_i        = mean_t log p_target
    IN_i, OUT_i = {mean_t log p_ref_r : ref_in[r]}, {... : not ref_in[r]}
    mu_in, mu_out = means of IN_i, OUT_i (the Gaussian MLE; the reference code uses medians)
    sd_in, sd_out = per-record np.std (ddof=0) of IN_i, OUT_i, or with global_variance (default) np.std of
                    every record's IN (OUT) statistics pooled together, exactly the reference code's
                    `fix_variance`; floored at min_std either way.
    lira_online:  log N(s_i; mu_in, sd_in) - log N(s_i; mu_out, sd_out)
    lira_offline: -log Pr[Z > s_i], Z ~ N(mu_out, sd_out)     (the paper's one-sided test; -log of the
                  survival function is monotone in the paper's 1 - Pr[Z > s] and keeps resolution in the
                  member tail, where low-FPR thresholds live)
NaN when T == 0. Sign: members have higher likelihood than OUT models predict, member-high for both.
A record without IN (online) or OUT references is an input error, not a silent NaN: in a keep-matrix study a
missing kind can correlate with membership.
Why global variance by default: OPD studies train few students, so each record has a handful of references
(one IN and one OUT with 4 students); the paper (Fig. 7) recommends a global variance below ~64 shadows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from attacks._aggregate import ref_means, seq_mean_logp
from attacks.base import AttackInputs, check_bool, check_range
from attacks.registry import register
from attacks.errors import AttackInputError


@dataclass(frozen=True)
class LiraParams:
    """Parameters of `lira_online` and `lira_offline`."""

    global_variance: bool = True
    """One IN and one OUT std pooled over all records (reference code's fix_variance) instead of per record."""
    min_std: float = 1e-4
    """Floor on every std (nats of mean log-prob), > 0; guards one-reference records and identical refs."""

    def __post_init__(self) -> None:
        check_bool("lira.global_variance", self.global_variance)
        check_range("lira.min_std", self.min_std, 0.0, None, lo_open=True)


def _stats(inputs: AttackInputs, attack: str, need_in: bool) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Target statistic [N] and each record's IN / OUT reference statistics."""
    target = np.array([seq_mean_logp(t) for t in inputs.fixed_target], dtype=np.float64)
    ins, outs = [], []
    for i in range(inputs.n):
        s_in, s_out = ref_means(inputs.fixed_refs[i], np.asarray(inputs.fixed_ref_in[i]))
        for kind, values, needed in (("IN", s_in, need_in), ("OUT", s_out, True)):
            if needed and values.size == 0:
                raise AttackInputError(f"{attack} needs at least one {kind} reference per record; this one has none",
                                 record_id=str(inputs.record_ids[i]), field="fixed_ref_in")
        ins.append(s_in)
        outs.append(s_out)
    return target, ins, outs


def _gaussians(groups: list[np.ndarray], params: LiraParams) -> tuple[np.ndarray, np.ndarray]:
    mu = np.array([g.mean() for g in groups], dtype=np.float64)
    if params.global_variance:
        pooled = np.concatenate(groups)
        pooled = pooled[np.isfinite(pooled)]
        sd = np.full(len(groups), np.std(pooled) if pooled.size else np.nan)
    else:
        sd = np.array([g.std() for g in groups], dtype=np.float64)
    return mu, np.maximum(sd, params.min_std)


@register("lira_online", LiraParams, needs=("fixed_target", "fixed_refs", "fixed_ref_in"), family="fixed",
          threat_model="IN+OUT", offline_form=("lira_offline", {}),
          description="LiRA online: Gaussian log-likelihood ratio IN vs OUT of the reference text's mean log p")
def lira_online(inputs: AttackInputs, params: LiraParams) -> np.ndarray:
    s, ins, outs = _stats(inputs, "lira_online", need_in=True)
    mu_in, sd_in = _gaussians(ins, params)
    mu_out, sd_out = _gaussians(outs, params)
    return norm.logpdf(s, mu_in, sd_in) - norm.logpdf(s, mu_out, sd_out)


@register("lira_offline", LiraParams, needs=("fixed_target", "fixed_refs", "fixed_ref_in"), family="fixed",
          description="LiRA offline: one-sided test against the OUT Gaussian of the reference text's mean log p")
def lira_offline(inputs: AttackInputs, params: LiraParams) -> np.ndarray:
    s, _, outs = _stats(inputs, "lira_offline", need_in=False)
    mu_out, sd_out = _gaussians(outs, params)
    return -norm.logsf(s, mu_out, sd_out)
