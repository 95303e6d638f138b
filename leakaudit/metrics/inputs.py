"""Checking a metric's inputs: 1-D labels (0/1 or bool) and scores of equal length, both classes present; the scores
replaced by dense ranks with NaN lowest."""

from __future__ import annotations

import numpy as np
from scipy import stats

from leakaudit.errors import InputError


class SingleClassError(InputError):
    """Metrics need both members and non-members."""


def prepare(labels, scores) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate and return (y bool [N], finite ranks [N], n_nan); NaN -> lowest, ±inf allowed.

    Scores are replaced by dense ranks: AUROC and TPR@FPR are invariant to monotone maps, and ranks are finite.
    """
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape or y.ndim != 1:
        raise InputError(f"labels and scores must be 1-D and equal length, got {y.shape} and {s.shape}")
    if not np.isin(y, (0, 1)).all():
        raise InputError("labels must be 0/1 or bool (is_member)")
    y = y.astype(bool)
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == len(y):
        raise SingleClassError(f"need members and non-members, got {n_pos} members of {len(y)} records")
    nan = np.isnan(s)
    ranks = stats.rankdata(np.where(nan, -np.inf, s), method="dense").astype(np.float64)
    return y, ranks, int(nan.sum())
