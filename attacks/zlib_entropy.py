"""`zlib`: the target's log-likelihood of the reference text divided by its zlib-compressed length.

Carlini et al. 2021, "Extracting Training Data from Large Language Models", https://arxiv.org/abs/2012.07805
(§6.1, "zlib": ratio of the model's perplexity to the zlib entropy of the text).

Shapes: fixed_target[i] [T]; texts[i] str.
    score_i = sum_t log p_target(x_t) / len(zlib.compress(texts[i].encode("utf-8")))   (bytes, level 6)
NaN when T == 0. Sign: sum log p is <= 0; a member's text has a larger (less negative) log-likelihood than
its compressibility predicts, so the ratio is member-high. (Carlini et al. rank by log-perplexity / zlib,
lower = member; this is that statistic times -T, the same per-text normalisation, sign flipped here.)
The compressed length uses stdlib zlib, exactly as the paper's code does; the text is the privileged text,
which the fixed signals score (plus an EOS token that has no bytes).
"""

from __future__ import annotations

import zlib

import numpy as np

from attacks.base import AttackInputs, NoParams
from attacks.registry import register


def zlib_length(text: str) -> int:
    """Bytes of zlib.compress(text as UTF-8) at the default level (6); >= 8 even for an empty text."""
    return len(zlib.compress(text.encode("utf-8")))


@register("zlib", NoParams, needs=("fixed_target", "texts"), family="fixed",
          description="sum log p_target of the reference text / its zlib-compressed length in bytes")
def zlib_ratio(inputs: AttackInputs, params: NoParams) -> np.ndarray:
    return np.array([float(x.astype(np.float64).sum()) / zlib_length(t) if x.size else float("nan")
                     for x, t in zip(inputs.fixed_target, inputs.texts)], dtype=np.float64)
