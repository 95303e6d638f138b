"""Reference-calibrated LOSS on the record's text: `ref_ratio_base` and `ref_ratio_refs`.

Carlini et al. 2021, "Extracting Training Data from Large Language Models", https://arxiv.org/abs/2012.07805
(§6.1, comparison to a smaller/other model); Watson et al. 2022, "On the Importance of Difficulty Calibration
in Membership Inference Attacks", https://arxiv.org/abs/2111.08440.

Shapes: fixed_target[i] [T]; fixed_base[i] [T]; fixed_refs[i] [R2, T]; fixed_ref_in[i] [R2] bool.
    ref_ratio_base: mean_t log p_target - mean_t log p_base
    ref_ratio_refs: mean_t log p_target - mean over OUT refs r of (mean_t log p_ref_r)
(a log-likelihood ratio per token, i.e. the log of the ratio of geometric-mean token probabilities).
NaN when T == 0. Sign: a member's target is above references that never saw it, member-high.
A record with no OUT reference is an input error for ref_ratio_refs (the pipeline fixes the count per record).
"""

from __future__ import annotations

import numpy as np

from attacks._aggregate import ref_means, seq_mean_logp
from attacks.base import AttackInputs, NoParams
from attacks.registry import register
from attacks.errors import AttackInputError


@register("ref_ratio_base", NoParams, needs=("fixed_target", "fixed_base"), family="fixed",
          description="mean log p_target - mean log p_base of the reference text")
def ref_ratio_base(inputs: AttackInputs, params: NoParams) -> np.ndarray:
    return np.array([seq_mean_logp(t) - seq_mean_logp(b) for t, b in zip(inputs.fixed_target, inputs.fixed_base)],
                    dtype=np.float64)


def out_reference_mean(inputs: AttackInputs, i: int, attack: str) -> float:
    """Mean over record i's OUT references of their mean log-prob of its text (AttackInputError if it has none)."""
    _, out = ref_means(inputs.fixed_refs[i], np.asarray(inputs.fixed_ref_in[i]))
    if out.size == 0:
        raise AttackInputError(f"{attack} needs at least one OUT reference per record; this one has none",
                         record_id=str(inputs.record_ids[i]), field="fixed_ref_in")
    return float(out.mean())


@register("ref_ratio_refs", NoParams, needs=("fixed_target", "fixed_refs", "fixed_ref_in"), family="fixed",
          description="mean log p_target - mean over OUT references of mean log p_ref, on the reference text")
def ref_ratio_refs(inputs: AttackInputs, params: NoParams) -> np.ndarray:
    return np.array([seq_mean_logp(t) - out_reference_mean(inputs, i, "ref_ratio_refs")
                     for i, t in enumerate(inputs.fixed_target)], dtype=np.float64)
