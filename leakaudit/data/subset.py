"""Seeded, reproducible choice of a subset of records."""

from __future__ import annotations

from typing import Sequence, TypeVar

import numpy as np

from leakaudit.errors import ConfigError

T = TypeVar("T")


def seeded_subset(items: Sequence[T], limit: int | None, seed: int) -> list[T]:
    """`limit` items chosen at random with `seed`, kept in their original order.

    A smaller limit with the same seed picks a subset of a larger one (prefix of one permutation).
    """
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in sorted(order[:limit].tolist())]
