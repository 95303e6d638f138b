"""On-policy sampling: the student draws one completion per prompt from its own current policy."""

from __future__ import annotations

import contextlib
from typing import Any, Sequence

import torch

from shadow_models.batching import left_pad, truncate_at_eos


def sample_completions(model: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float,
                       top_p: float, eos_ids: Sequence[int], pad_id: int, seed: int,
                       autocast: contextlib.AbstractContextManager | None = None) -> list[list[int]]:
    """One sampled completion per prompt (EOS kept if generated, nothing after it).

    Sampling is pure temperature / top-p (top_k disabled), under ``torch.no_grad`` and with the model in eval
    mode (so LoRA dropout is off while sampling); the global torch RNG is seeded with `seed` first, which makes
    every step reproducible on its own (and a resumed run identical to an uninterrupted one).
    """
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_id, device)
    gen_cfg = GenerationConfig(do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                               max_new_tokens=max_new_tokens, eos_token_id=list(eos_ids), pad_token_id=pad_id)
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    try:
        with torch.no_grad(), (autocast or contextlib.nullcontext()):
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_cfg)
    finally:
        model.train(was_training)
    new = out[:, ids.shape[1]:].tolist()
    return [truncate_at_eos(row, eos_ids) for row in new]


def eos_token_ids(tokenizer: Any, model: Any) -> list[int]:
    """EOS ids from the tokenizer and the model's generation config (chat models may have several)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(extra, int):
        extra = [extra]
    for e in extra or []:
        if int(e) not in ids:
            ids.append(int(e))
    return ids
