"""`leaky`: rectified per-token gap between the target and its matched OUT references on the target's own samples.

leakaudit's own attack (docs/architecture.md, "Attacks"); no paper of its own. It combines reference-model calibration
(Carlini et al. 2021, "Extracting Training Data from Large Language Models", https://arxiv.org/abs/2012.07805,
§6.2; Mireshghallah et al. 2022, https://arxiv.org/abs/2203.03929) with the OPD setting: the student was pulled
toward a teacher that saw the record's privileged text *at the tokens the student itself samples*, so the
signal is read on fresh samples from the target, not on the privileged text.

Shapes, for record i and trajectory j (T tokens, R matched OUT references):
    fresh_target[i][j]  [T]     log p_target(y_t)
    fresh_refs[i][j]    [R, T]  log p_ref_r(y_t) on the same tokens
    gap_t     = log p_target(y_t) - reduce_r log p_ref_r(y_t)          reduce = max (default) or mean
    leaky_t   = gap_t if gap_t > 0 else slope * gap_t                  LeakyReLU
    traj_ij   = mean_t leaky_t   (or the mean of the top max(1, floor(fraction*T)) leaky_t)
    score_i   = mean_j traj_ij   over non-empty trajectories; NaN when all are empty
Sign: a member's target puts more mass than every OUT reference on tokens steered by the privileged text, so
positive gaps are member evidence: higher = more likely member, no negation needed.

Why slope = 0.1 by default: slope 1 is `fresh_gap_max`, where the many small negative gaps (biased downward
by taking the max over R noisy references) swamp the few large positive gaps at leaking tokens; slope 0
discards the negative side completely, so records whose gaps are all negative tie at exactly 0 and the
low-FPR end of the ROC loses resolution. 0.1 keeps the order among such records while letting one positive
gap outweigh ten equally large negative ones. It is a reasoned default, not a tuned one; sweep it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Iterator

import numpy as np

from attacks._aggregate import highest_mean, mean_or_nan, per_record, truncate
from attacks.base import AttackInputs, check_choice, check_max_tokens, check_range
from attacks.registry import register


@dataclass(frozen=True)
class LeakyParams:
    """Parameters of `leaky`."""

    slope: float = 0.1
    """LeakyReLU slope for negative gaps, in [0, 1]: 0 = keep only positive gaps, 1 = no rectification."""
    token_aggregation: str = "mean"
    """'mean' over a trajectory's tokens, or 'topk' = mean of its highest topk_fraction of rectified gaps."""
    topk_fraction: float = 0.2
    """Fraction of tokens kept by 'topk', in (0, 1]; at least one token is always kept."""
    reference_reduction: str = "max"
    """How the R matched references are combined per token: 'max' (strictest) or 'mean' of their log-probs."""
    max_tokens: int | None = None
    """Score only the first K tokens of each trajectory (None = all)."""

    def __post_init__(self) -> None:
        check_range("leaky.slope", self.slope, 0.0, 1.0)
        check_choice("leaky.token_aggregation", self.token_aggregation, ("mean", "topk"))
        check_range("leaky.topk_fraction", self.topk_fraction, 0.0, 1.0, lo_open=True)
        check_choice("leaky.reference_reduction", self.reference_reduction, ("max", "mean"))
        check_max_tokens("leaky.max_tokens", self.max_tokens)


def token_gaps(target: np.ndarray, refs: np.ndarray, reduction: str) -> np.ndarray:
    """[T] log p_target - reduce_r log p_ref_r, reduce over axis 0 of refs [R, T] ('max' or 'mean')."""
    ref = refs.max(axis=0) if reduction == "max" else refs.mean(axis=0)
    return target.astype(np.float64) - ref.astype(np.float64)


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """x where x > 0, slope * x elsewhere (one np.where; nothing in scipy is simpler)."""
    return np.where(x > 0, x, slope * x)


def fresh_gaps(inputs: AttackInputs, i: int, reduction: str, max_tokens: int | None) -> Iterator[np.ndarray]:
    """Per-token gaps of record i's trajectories to its matched references (first max_tokens tokens)."""
    for tgt, refs in zip(inputs.fresh_target[i], inputs.fresh_refs[i]):
        yield token_gaps(truncate(tgt, max_tokens), truncate(refs, max_tokens), reduction)


@register("leaky", LeakyParams, needs=("fresh_target", "fresh_refs"), family="fresh",
          description="LeakyReLU of the per-token gap target - max(matched OUT refs) on the target's own samples")
def leaky(inputs: AttackInputs, params: LeakyParams) -> np.ndarray:
    if params.token_aggregation == "mean":
        reduce = mean_or_nan
    else:
        reduce = partial(highest_mean, fraction=params.topk_fraction)
    return per_record(
        ((leaky_relu(g, params.slope) for g in fresh_gaps(inputs, i, params.reference_reduction,
                                                            params.max_tokens))
         for i in range(inputs.n)),
        reduce)
