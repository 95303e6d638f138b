"""Tensor layout shared by sampling, teacher scoring and the student update.

A batch is ``[left-padded prompt | completion, right-padded]``, so every row's completion starts at the same
column and the logits that predict completion token t sit at column ``P - 1 + t`` for all rows. Position ids are
recomputed from the attention mask, so a left-padded prompt scores exactly like an unpadded one.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists -> (ids [B, L], attention mask [B, L])."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists -> (ids [B, L], mask [B, L]); mask is 1 on real tokens only."""
    width = max(max(len(s) for s in seqs), 1)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device)


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only (0 for left padding)."""
    return (mask.cumsum(-1) - 1).clamp_min(0)


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
