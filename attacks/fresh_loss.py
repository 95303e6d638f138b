"""`fresh_loss`: the target's own mean log-prob of its fresh samples (same-trajectory baseline).

The LOSS attack (Yeom et al. 2018, "Privacy Risk in Machine Learning: Analyzing the Connection to
Overfitting", https://arxiv.org/abs/1709.01604) read on the target's own samples instead of the record's text.

Shapes: fresh_target[i][j] [T]. score_i = mean_j mean_t log p_target(y_t) over non-empty trajectories (NaN
when all are empty). Sign: a member's target is more confident on what it samples for that prompt, so the
mean log-prob itself is member-high (no negation).
"""

from __future__ import annotations

import numpy as np

from attacks._aggregate import mean_or_nan, per_record, truncate
from attacks.base import AttackInputs, FreshParams
from attacks.registry import register


@register("fresh_loss", FreshParams, needs=("fresh_target",), family="fresh",
          description="mean log p_target of the target's own samples (no reference)")
def fresh_loss(inputs: AttackInputs, params: FreshParams) -> np.ndarray:
    return per_record(
        ((truncate(t, params.max_tokens).astype(np.float64) for t in trajs) for trajs in inputs.fresh_target),
        mean_or_nan)
