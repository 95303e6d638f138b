"""Per-token distillation losses on completion tokens, built on TRL's self-distillation loss helpers.

All functions take logits already aligned with the completion: ``student_logits[b, t]`` and
``teacher_logits[b, t]`` are the next-token distributions that predicted ``completion_ids[b, t]``
(shapes [B, C, V] and [B, C]). They return a per-token loss [B, C]; ``masked_mean`` reduces it over the
completion tokens only (padding after EOS and the prompt never enter, since they are not in [B, C] or are
masked out).

- ``sampled_rkl``: Thinking Machines' "On-Policy Distillation" (2025): per-token advantage
  ``A_t = log p_t(y_t) - log p_s(y_t)`` (detached), loss ``-A_t * log p_s(y_t)`` — policy gradient with the
  negative sampled reverse-KL as reward. TRL's ``compute_sampled_token_self_distillation_loss``
  returns exactly ``(log p_s - log p_t).detach() * log p_s``.
- ``full_rkl``: ``sum_v p_s(v) (log p_s(v) - log p_t(v))``; TRL's full-logit divergence with alpha = 1.
- ``jsd``: generalized JSD of GKD (Agarwal et al. 2024, TRL ``generalized_jsd_loss``): mixture
  ``m = (1-beta) p_s + beta p_t``, loss ``beta KL(p_t||m) + (1-beta) KL(p_s||m)``; beta = 0 is forward
  KL(p_t||p_s), beta = 1 reverse KL. With ``topk`` the support is the teacher's top-k tokens at each position
  and both distributions are renormalised over it. (TRL's own top-k helper takes the *student's* top-k, so the
  gather is done here and TRL's ``compute_divergence`` does the rest.)
"""

from __future__ import annotations

import warnings

import torch

with warnings.catch_warnings():
    # trl.experimental warns on import; these loss helpers are pure functions we pin by golden-value tests.
    warnings.simplefilter("ignore")
    from trl.experimental.sdft.loss_utils import (
        compute_divergence,
        compute_full_logit_self_distillation_loss,
        compute_sampled_token_self_distillation_loss,
    )
    from trl.trainer.utils import selective_log_softmax


def sampled_logps(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[..., ids]: [B, C, V] x [B, C] -> [B, C] (TRL's memory-lean selective_log_softmax)."""
    return selective_log_softmax(logits, ids)


def topk_jsd(student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, beta: float, topk: int) -> torch.Tensor:
    """Generalized JSD over the teacher's top-k tokens, both distributions renormalised there. -> [B, C]."""
    k = min(topk, teacher_logits.shape[-1])
    idx = torch.topk(teacher_logits, k=k, dim=-1).indices
    s = torch.gather(student_logits, -1, idx).log_softmax(-1)
    t = torch.gather(teacher_logits, -1, idx).log_softmax(-1)
    return compute_divergence(s, t, beta)


def per_token_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, completion_ids: torch.Tensor, *,
                   loss: str, beta: float = 0.5, topk: int | None = None) -> torch.Tensor:
    """The per-token loss [B, C] for `loss` in {'sampled_rkl', 'full_rkl', 'jsd'} (float32 maths)."""
    s = student_logits.float()
    t = teacher_logits.detach().float()
    if loss == "sampled_rkl":
        return compute_sampled_token_self_distillation_loss(s, t, completion_ids, distillation_alpha=1.0)
    if loss == "full_rkl":
        return compute_full_logit_self_distillation_loss(s, t, distillation_alpha=1.0)
    if loss == "jsd":
        if topk is not None:
            return topk_jsd(s, t, beta=beta, topk=topk)
        return compute_full_logit_self_distillation_loss(s, t, distillation_alpha=beta)
    raise ValueError(f"unknown loss {loss!r}")


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of `values` over positions where `mask` is 1 (inf/nan at masked-out positions stay out)."""
    keep = mask.bool()
    return torch.where(keep, values, torch.zeros_like(values)).sum()  # where, not *: inf * 0 would be nan


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over positions where `mask` is 1 (token-level mean over the whole batch; 0 if empty)."""
    return masked_sum(values, mask) / mask.bool().sum().clamp_min(1).to(values.dtype)
