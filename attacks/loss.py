"""`loss`: mean log-prob of the record's reference text under the target.

Yeom et al. 2018, "Privacy Risk in Machine Learning: Analyzing the Connection to Overfitting",
https://arxiv.org/abs/1709.01604 (the LOSS attack).

Shapes: fixed_target[i] [T]. score_i = mean_t log p_target(x_t); NaN when T == 0.
Sign: mean log-prob = -loss, so higher = lower loss = more likely member (the negation is in the definition).
"""

from __future__ import annotations

import numpy as np

from attacks._aggregate import mean_or_nan
from attacks.base import AttackInputs, NoParams
from attacks.registry import register


@register("loss", NoParams, needs=("fixed_target",), family="fixed",
          description="mean log p_target of the record's reference text (LOSS)")
def loss(inputs: AttackInputs, params: NoParams) -> np.ndarray:
    return np.array([mean_or_nan(x.astype(np.float64)) for x in inputs.fixed_target], dtype=np.float64)
