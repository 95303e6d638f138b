"""`zlib`: the target's mean token log-likelihood of the reference text divided by its zlib-compressed length.

Carlini et al. 2021, "Extracting Training Data from Large Language Models", https://arxiv.org/abs/2012.07805
(§6.1, "zlib": ratio of the model's log-perplexity to the zlib entropy of the text); as implemented in MIMIR
(iamgroot42/mimir, mimir/attacks/zlib.py: `zlib_entropy = len(zlib.compress(bytes(text, "utf-8")))`,
`return loss / zlib_entropy`, where `loss` is the MEAN negative log-likelihood per token, i.e. the
log-perplexity, lower = member).

Shapes: fixed_target[i] [T]; texts[i] str.
    score_i = mean_t log p_target(x_t) / len(zlib.compress(texts[i].encode("utf-8")))   (bytes, level 6)
NaN when T == 0. Sign: mean log p is <= 0; a member's text has a larger (less negative) log-likelihood than
its compressibility predicts, so the ratio is member-high. This is exactly -1 times MIMIR's statistic
(log-perplexity / zlib = -mean log p / zlib, lower = member), sign flipped so that higher = member. The
per-token MEAN matters: the sum would multiply each text's score by its token count T, so long texts would
rank as non-members whatever the model does.
The compressed length uses stdlib zlib, exactly as the paper's code does; the text is the privileged text,
which the fixed signals score (plus an EOS token that has no bytes).
"""

from __future__ import annotations

import zlib

import numpy as np

from attacks._aggregate import seq_mean_logp
from attacks.base import AttackInputs, NoParams
from attacks.registry import register


def zlib_length(text: str) -> int:
    """Bytes of zlib.compress(text as UTF-8) at the default level (6); >= 8 even for an empty text."""
    return len(zlib.compress(text.encode("utf-8")))


@register("zlib", NoParams, needs=("fixed_target", "texts"), family="fixed",
          description="mean log p_target of the reference text / its zlib-compressed length in bytes")
def zlib_ratio(inputs: AttackInputs, params: NoParams) -> np.ndarray:
    return np.array([float(seq_mean_logp(x)) / zlib_length(t) for x, t in zip(inputs.fixed_target, inputs.texts)],
                    dtype=np.float64)
