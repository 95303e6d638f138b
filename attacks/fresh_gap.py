"""Same-trajectory gap baselines: `fresh_gap_max`, `fresh_gap_mean`, `fresh_gap_base`.

Ablations of `leaky` (attacks/leaky.py) on the same fresh trajectories, built on its `token_gaps` so there is
one copy of the gap: reference calibration as in Carlini et al. 2021, https://arxiv.org/abs/2012.07805 §6.2,
without the LeakyReLU.

Shapes, for record i, trajectory j: fresh_target[i][j] [T]; fresh_refs[i][j] [R, T]; fresh_base[i][j] [T].
    fresh_gap_max:  mean_t (log p_target - max_r log p_ref_r)    == leaky with slope 1
    fresh_gap_mean: mean_t (log p_target - mean_r log p_ref_r)   (mean of log-probs, not of probabilities)
    fresh_gap_base: mean_t (log p_target - log p_base)
then mean over non-empty trajectories; NaN when all are empty. Sign: member-high (target above reference).
"""

from __future__ import annotations

import numpy as np

from attacks._aggregate import mean_or_nan, per_record, truncate
from attacks.base import AttackInputs, FreshParams
from attacks.leaky import fresh_gaps, token_gaps
from attacks.registry import register


def _gap_to_refs(inputs: AttackInputs, params: FreshParams, reduction: str) -> np.ndarray:
    return per_record((fresh_gaps(inputs, i, reduction, params.max_tokens) for i in range(inputs.n)),
                      mean_or_nan)


@register("fresh_gap_max", FreshParams, needs=("fresh_target", "fresh_refs"), family="fresh",
          description="mean gap target - max(matched OUT refs) on the target's own samples, no ReLU")
def fresh_gap_max(inputs: AttackInputs, params: FreshParams) -> np.ndarray:
    return _gap_to_refs(inputs, params, "max")


@register("fresh_gap_mean", FreshParams, needs=("fresh_target", "fresh_refs"), family="fresh",
          description="mean gap target - mean(matched OUT refs) on the target's own samples")
def fresh_gap_mean(inputs: AttackInputs, params: FreshParams) -> np.ndarray:
    return _gap_to_refs(inputs, params, "mean")


@register("fresh_gap_base", FreshParams, needs=("fresh_target", "fresh_base"), family="fresh",
          description="mean gap target - base model on the target's own samples")
def fresh_gap_base(inputs: AttackInputs, params: FreshParams) -> np.ndarray:
    k = params.max_tokens
    return per_record(
        ((token_gaps(truncate(t, k), truncate(b, k)[None, :], "max") for t, b in zip(trajs, base))
         for trajs, base in zip(inputs.fresh_target, inputs.fresh_base)),
        mean_or_nan)
