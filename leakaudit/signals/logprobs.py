"""Log-probabilities of chosen tokens from final hidden states, without the [B, L, V] logits tensor.

Only the positions that predict a scored token go through the output head, in chunks of `chunk` rows, so the
largest float tensor alive is [chunk, V]. Everything here runs in float32.
"""

from __future__ import annotations

from typing import Callable

import torch


def head_logprobs(hidden: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor], targets: torch.Tensor, *,
                  vocab_stats: bool = False, chunk: int = 256, softcap: float | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Per-row log p(target) and, optionally, Min-K%++'s mean and std of log p under p.

    hidden: [N, H] final (normed) hidden states at the positions that predict `targets`.
    head: the output projection, [*, H] -> [*, V].
    targets: int64 [N] token ids.
    softcap: final-logit soft-capping (Gemma-2 style, logits = cap * tanh(logits / cap)) when not None.
    Returns (logp [N], mu [N] | None, sigma [N] | None), float32, with
        logp = logit[target] - logsumexp(logits), mu = sum_v p_v log p_v, sigma^2 = sum_v p_v (log p_v - mu)^2.
    """
    n = hidden.shape[0]
    logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
    mu = torch.empty_like(logp) if vocab_stats else None
    sigma = torch.empty_like(logp) if vocab_stats else None
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        logits = head(hidden[start:stop]).float()  # [c, V]
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        lse = torch.logsumexp(logits, dim=-1)  # [c]
        logp[start:stop] = logits.gather(1, targets[start:stop].unsqueeze(1)).squeeze(1) - lse
        if vocab_stats:
            lp = logits.sub_(lse.unsqueeze(1))  # in place: logits now hold log p
            p = lp.exp()
            m = (p * lp).sum(-1)
            var = (p * (lp - m.unsqueeze(1)).square_()).sum(-1)
            mu[start:stop] = m
            sigma[start:stop] = var.clamp_(min=0).sqrt_()
    return logp, mu, sigma
