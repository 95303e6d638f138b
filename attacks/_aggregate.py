"""Token and trajectory reductions shared by the attacks (one copy each, so every attack counts alike).

Fractions select ``max(1, floor(fraction * T))`` tokens, as in the Min-K% and Min-K%++ reference code
(``int(len(x) * ratio)``), except that a non-empty sequence always keeps at least one token.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np


def n_selected(t: int, fraction: float) -> int:
    """How many of `t` tokens a fraction keeps: max(1, floor(fraction * t)); 0 when t == 0."""
    return 0 if t == 0 else max(1, int(np.floor(fraction * t)))


def mean_or_nan(values: np.ndarray) -> float:
    """Mean of a 1-D array, NaN when empty (no warning)."""
    return float(np.mean(values)) if values.size else float("nan")


def lowest_mean(values: np.ndarray, fraction: float) -> float:
    """Mean of the lowest max(1, floor(fraction*T)) values; NaN when empty."""
    k = n_selected(values.size, fraction)
    return float(np.mean(np.sort(values)[:k])) if k else float("nan")


def highest_mean(values: np.ndarray, fraction: float) -> float:
    """Mean of the highest max(1, floor(fraction*T)) values; NaN when empty."""
    k = n_selected(values.size, fraction)
    return float(np.mean(np.sort(values)[-k:])) if k else float("nan")


def over_trajectories(per_token: Iterable[np.ndarray], reduce: Callable[[np.ndarray], float]) -> float:
    """Reduce each non-empty trajectory's per-token values to one number, then average over trajectories.

    Empty trajectories are skipped (they contribute nothing); NaN when every trajectory is empty.
    Trajectories are weighted equally, whatever their length.
    """
    scores = [reduce(v) for v in per_token if v.size]
    return float(np.mean(scores)) if scores else float("nan")


def truncate(values: np.ndarray, max_tokens: int | None) -> np.ndarray:
    """The first `max_tokens` positions along the last axis (all when None)."""
    return values if max_tokens is None else values[..., :max_tokens]


def seq_mean_logp(values: np.ndarray) -> np.ndarray:
    """Mean log-prob along the last axis ([T] -> scalar, [R, T] -> [R]); NaN where T == 0."""
    if values.shape[-1] == 0:
        return np.full(values.shape[:-1], np.nan)
    return values.astype(np.float64).mean(axis=-1)


def per_record(values_per_record: Iterable[Iterable[np.ndarray]],
               reduce: Callable[[np.ndarray], float]) -> np.ndarray:
    """float64 [N]: `over_trajectories` for each record's iterable of per-token value arrays."""
    return np.array([over_trajectories(v, reduce) for v in values_per_record], dtype=np.float64)


def ref_means(refs: np.ndarray, ref_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-reference mean log-prob of one record's text, split into (IN refs, OUT refs); [R2, T] -> ([k], [m])."""
    means = seq_mean_logp(refs)
    return means[ref_in], means[~ref_in]
