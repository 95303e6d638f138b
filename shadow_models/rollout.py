"""On-policy sampling: the student draws one completion per prompt from its own current policy.

Two decoders compute the same rollouts: 'loop' (the default), leakaudit.signals.decode's hand-written loop with
generate's own draw (MultinomialDraw: softmax + torch.multinomial from the global RNG seeded here), and
'generate', ``model.generate(do_sample=True)``, the path before it. They differ only in how the prefill sends the
last prompt position to the LM head (by index instead of a strided slice), which on CPU spares a copy of the
bf16 head weight per row: a default-preset rollout (8 prompts of ~140 tokens, 48 new tokens, bf16 copy, 1 thread)
6.1 -> 4.6 CPU s, 1.33x, its prefill 2.0 -> 0.58 s (bench/results/decode.json). The tokens are the same (there,
and tests/test_decode.py: float32, and the trainer's weights after training, fp32 and bf16).
"""

from __future__ import annotations

import contextlib
from typing import Any, Sequence

import torch

from leakaudit.signals.decode import MultinomialDraw, decode
from shadow_models.batching import left_pad, truncate_at_eos
from shadow_models.config import ROLLOUT_DECODERS

DECODERS = ROLLOUT_DECODERS  # one list, kept where OPDConfig validates its field


class RowSeededDraw(MultinomialDraw):
    """MultinomialDraw with one torch generator per row: row i's tokens depend on its own seed and logits only, not
    on which other rows share its batch (OPDConfig.rollout_seeding 'record')."""

    def __init__(self, temperature: float, top_p: float, seeds: Sequence[int], device: torch.device):
        super().__init__(temperature, top_p)
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        scores = logits
        for warp in self.warpers:
            scores = warp(None, scores)
        probs = torch.softmax(scores, dim=-1)
        return torch.cat([torch.multinomial(probs[i:i + 1], num_samples=1, generator=g).view(1)
                          for i, g in enumerate(self.generators)])


def sample_completions(model: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float,
                       top_p: float, eos_ids: Sequence[int], pad_id: int, seed: int,
                       autocast: contextlib.AbstractContextManager | None = None,
                       decoder: str = "loop", row_seeds: Sequence[int] | None = None) -> list[list[int]]:
    """One sampled completion per prompt (EOS kept if generated, nothing after it).

    Sampling is pure temperature / top-p (top_k disabled), under ``torch.no_grad`` and with the model in eval
    mode (so LoRA dropout is off while sampling); the global torch RNG is seeded with `seed` first, which makes
    every step reproducible on its own (and a resumed run identical to an uninterrupted one). `decoder`: 'loop'
    or 'generate' (see the module docstring: the same tokens, and the same global RNG state afterwards).
    `row_seeds` (loop only): one seed per prompt, each row drawn from its own generator (RowSeededDraw).
    """
    if decoder not in DECODERS:
        raise ValueError(f"decoder={decoder!r}: expected one of {DECODERS}")
    if row_seeds is not None and (decoder != "loop" or len(row_seeds) != len(prompts)):
        raise ValueError("row_seeds: one seed per prompt, with decoder='loop' only")
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_id, device)
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    try:
        with torch.no_grad(), (autocast or contextlib.nullcontext()):
            if decoder == "loop":
                draw = (MultinomialDraw(temperature, top_p) if row_seeds is None
                        else RowSeededDraw(temperature, top_p, row_seeds, device))
                new = decode(model, ids, mask, max_new_tokens=max_new_tokens, draw=draw, eos_ids=eos_ids,
                             pad_id=pad_id)
            else:
                from transformers import GenerationConfig

                gen_cfg = GenerationConfig(do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                                           max_new_tokens=max_new_tokens, eos_token_id=list(eos_ids),
                                           pad_token_id=pad_id)
                new = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_cfg)[:, ids.shape[1]:]
    finally:
        model.train(was_training)
    return [truncate_at_eos(row, eos_ids) for row in new.tolist()]


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
