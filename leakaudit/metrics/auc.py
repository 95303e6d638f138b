"""The Mann-Whitney AUROC (ties count 1/2; equals sklearn's roc_auc_score), vectorised over resamples."""

from __future__ import annotations

import numpy as np
from scipy import stats


def _auc_statistic(pos: np.ndarray, neg: np.ndarray, axis: int = -1) -> np.ndarray:
    """Vectorised Mann–Whitney AUROC (ties count ½), for scipy.stats.bootstrap; equals roc_auc_score."""
    pos, neg = np.moveaxis(pos, axis, -1), np.moveaxis(neg, axis, -1)
    n_pos, n_neg = pos.shape[-1], neg.shape[-1]
    ranks = stats.rankdata(np.concatenate([pos, neg], axis=-1), axis=-1)
    return (ranks[..., :n_pos].sum(axis=-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def auroc(labels, scores) -> float:
    """Mann–Whitney AUROC (ties count ½; equals roc_auc_score) of bool labels and finite scores."""
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    return float(_auc_statistic(s[y], s[~y]))
