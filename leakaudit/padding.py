"""Padding token lists into tensors: shared by signals (scoring, sampling) and shadow_models (training)."""

from __future__ import annotations

from typing import Sequence

import torch


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists -> (ids [B, L], attention mask [B, L]), int64; mask is 1 on real tokens."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s):] = torch.as_tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists -> (ids [B, L], mask [B, L]); mask is 1 on real tokens only; L >= 1."""
    width = max(max(len(s) for s in seqs), 1)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device)


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only (0 at each row's first real token, 0 on left padding)."""
    return (mask.cumsum(-1) - 1).clamp_min(0)
