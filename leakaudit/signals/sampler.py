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

from leakaudit.errors import ConfigError


def row_seed(seed: int, prompt: Sequence[int], index: int) -> int:
    """A 63-bit seed from (seed, prompt ids, trajectory index): sha256 of their little-endian bytes."""
    if seed is None:
        raise ConfigError("SamplingConfig.seed is None: pass an int seed (a study derives one per target from its "
                          "master `seed`)")
    h = hashlib.sha256()
    h.update(np.asarray([seed, index], dtype=np.int64).tobytes())
    h.update(np.asarray(list(prompt), dtype=np.int64).tobytes())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def nucleus_threshold(probs: torch.Tensor, top_p: float, k: int = 512) -> torch.Tensor:
    """Per-row probability threshold tau of the top-p nucleus: keep tokens with p >= tau.

    probs: [B, V]. The nucleus is the smallest set of most likely tokens whose mass reaches top_p (all tokens
    tied at tau are kept). Found among the top k tokens; rows whose top-k mass falls short are fully sorted.
    Returns [B, 1] of probs' dtype.
    """
    k = min(k, probs.shape[-1])
    vals = probs.topk(k, dim=-1, sorted=True).values  # [B, k] descending
    short = vals.sum(-1) < top_p
    if bool(short.any()):
        full = probs.new_zeros(probs.shape)
        full[~short, :k] = vals[~short]
        full[short] = torch.sort(probs[short], dim=-1, descending=True).values
        vals = full
    n_keep = ((vals.cumsum(-1) - vals) < top_p).sum(-1, keepdim=True).clamp_(min=1)  # [B, 1]
    return vals.gather(-1, n_keep - 1)


def _last_positive(x: torch.Tensor) -> torch.Tensor:
    """Index of the last entry > 0 in each row of x [B, K] (0 if none): [B, 1]."""
    return (x > 0).long().cumsum(-1).argmax(-1, keepdim=True)


def sample_next(scores: torch.Tensor, uniforms: torch.Tensor, temperature: float, top_p: float,
                block: int = 256) -> torch.Tensor:
    """Draw one token per row by inverse CDF over the vocabulary in token-id order.

    scores: [B, V] logits; uniforms: [B] float64 in [0, 1). Returns int64 [B].
    Temperature divides the logits; top-p keeps the nucleus (see nucleus_threshold). The CDF is two-level
    (block sums, then one block of `block` tokens) so that no [B, V] cumulative sum is needed. Every step is
    row-wise, so a row's token does not depend on the other rows of the batch.
    """
    probs = torch.softmax(scores.float() / temperature, dim=-1)
    if top_p < 1.0:
        probs = probs.masked_fill(probs < nucleus_threshold(probs, top_p), 0.0)
    b, v = probs.shape
    n_blocks = -(-v // block)
    if n_blocks * block != v:
        probs = torch.nn.functional.pad(probs, (0, n_blocks * block - v))
    blocks = probs.view(b, n_blocks, block)
    block_mass = blocks.sum(-1, dtype=torch.float64)  # [B, nb]
    block_cdf = block_mass.cumsum(-1)
    target = uniforms.to(torch.float64).unsqueeze(-1) * block_cdf[:, -1:]  # [B, 1]
    # A draw that rounds onto a total would land past the last kept entry: clamp to that entry.
    bi = torch.minimum(torch.searchsorted(block_cdf, target, right=True), _last_positive(block_mass))
    rest = target - (block_cdf.gather(-1, bi) - block_mass.gather(-1, bi))
    inner = blocks[torch.arange(b), bi.squeeze(-1)]  # [B, block]
    inner_cdf = inner.cumsum(-1, dtype=torch.float64)
    j = torch.minimum(torch.searchsorted(inner_cdf, rest, right=True), _last_positive(inner))
    return (bi * block + j).squeeze(-1)


class SeededSampler:
    """Logits processor for `model.generate(do_sample=False)` that samples each row with its own generator.

    seeds: one 63-bit seed per batch row (see `row_seed`).
    """

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float):
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.temperature = float(temperature)
        self.top_p = float(top_p)

    def draw(self, scores: torch.Tensor) -> torch.Tensor:
        """One token per row from logits scores [B, V] (each row's generator advances by one draw): int64 [B]."""
        if scores.shape[0] != len(self.generators):
            raise RuntimeError(f"SeededSampler built for {len(self.generators)} rows, got {scores.shape[0]}")
        uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in self.generators])
        return sample_next(scores.float(), uniforms, self.temperature, self.top_p).to(scores.device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokens = self.draw(scores)
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
