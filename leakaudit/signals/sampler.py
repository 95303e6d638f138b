"""Per-row seeded sampling, so a trajectory depends on (seed, prompt, index) and not on its batch.

`model.generate` draws every row of a batch from one global generator, so the tokens of a row change with the
batch it lands in. `SeededSampler` is a logits processor that does the sampling itself (temperature, top-p,
inverse-CDF draw with the row's own torch.Generator) and returns scores that are -inf everywhere except the
chosen token; generate then runs greedy (do_sample=False) and simply takes that token.

Rows stay batch-invariant up to floating-point noise in the logits: a token flips only if the row's uniform
draw falls within ~1e-6 of a CDF boundary.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
import torch


def row_seed(seed: int, prompt: Sequence[int], index: int) -> int:
    """A 63-bit seed from (seed, prompt ids, trajectory index): sha256 of their little-endian bytes."""
    h = hashlib.sha256()
    h.update(np.asarray([seed, index], dtype=np.int64).tobytes())
    h.update(np.asarray(list(prompt), dtype=np.int64).tobytes())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def sample_next(scores: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Draw one token per row by inverse CDF.

    scores: [B, V] logits; uniforms: [B] float64 in [0, 1). Returns int64 [B].
    Temperature divides the logits; top-p keeps the smallest prefix of the probability-sorted vocabulary
    (stable sort, so ties break by token id) whose mass reaches top_p.
    """
    probs = torch.softmax(scores.double() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        mass_before = sorted_p.cumsum(-1) - sorted_p
        sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)
    else:
        sorted_p, order = probs, None
    cdf = sorted_p.cumsum(-1)
    target = (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    pos = torch.searchsorted(cdf, target, right=True)
    # A draw that rounds onto the total would land past the last kept token: clamp to that token.
    last_kept = (sorted_p > 0).long().cumsum(-1).argmax(-1, keepdim=True)
    pos = torch.minimum(pos, last_kept)
    token = pos if order is None else order.gather(-1, pos)
    return token.squeeze(-1)


class SeededSampler:
    """Logits processor for `model.generate(do_sample=False)` that samples each row with its own generator.

    seeds: one 63-bit seed per batch row (see `row_seed`).
    """

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float):
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.temperature = float(temperature)
        self.top_p = float(top_p)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != len(self.generators):
            raise RuntimeError(f"SeededSampler built for {len(self.generators)} rows, got {scores.shape[0]}")
        uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in self.generators])
        tokens = sample_next(scores.float(), uniforms, self.temperature, self.top_p).to(scores.device)
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, tokens.unsqueeze(1), 0.0)
        return out


def trim_completion(ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """Cut a generated row after its first EOS (kept); everything after it is padding."""
    eos = set(int(e) for e in eos_ids)
    out: list[int] = []
    for tok in ids:
        out.append(int(tok))
        if int(tok) in eos:
            break
    return out
