"""Tensor layout shared by sampling, teacher scoring and the student update.

A batch is ``[left-padded prompt | completion, right-padded]``, so every row's completion starts at the same
column and the logits that predict completion token t sit at column ``P - 1 + t`` for all rows. Position ids are
recomputed from the attention mask, so a left-padded prompt scores exactly like an unpadded one.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from leakaudit.padding import left_pad, position_ids


def truncate_at_eos(tokens: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """Keep tokens up to and including the first EOS (the rest is generation padding)."""
    out: list[int] = []
    eos = set(eos_ids)
    for tok in tokens:
        out.append(int(tok))
        if tok in eos:
            break
    return out


def completion_logits(model: Any, prompts: Sequence[Sequence[int]], comp_ids: torch.Tensor, comp_mask: torch.Tensor,
                      pad_id: int) -> torch.Tensor:
    """Logits [B, C, V] predicting each completion token given its prompt and the completion so far.

    Only the last C + 1 positions go through the LM head (``logits_to_keep``), not the whole prompt.
    """
    p_ids, p_mask = left_pad(prompts, pad_id, comp_ids.device)
    ids = torch.cat([p_ids, comp_ids], dim=1)
    mask = torch.cat([p_mask, comp_mask], dim=1)
    n = comp_ids.shape[1]
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False,
                logits_to_keep=n + 1)
    return out.logits[:, :-1, :]
