"""ROC metrics of one group of scores: AUROC with its CI, TPR at each FPR alpha, class counts, and the curve's points
for plotting."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score, roc_curve

from leakaudit.metrics.bootstrap import auroc_ci, cluster_auroc_ci
from leakaudit.metrics.inputs import prepare
from leakaudit.metrics.keys import DEFAULT_ALPHAS, resolvable_key, tpr_key


def tpr_at_fpr(labels, scores, alpha: float) -> float:
    """Largest TPR over thresholds with FPR ≤ alpha (NaN scores lowest)."""
    y, s, _ = prepare(labels, scores)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return float(tpr[fpr <= alpha].max())


def roc_metrics(labels, scores, *, n_boot: int = 1000, seed: int = 0, alphas=DEFAULT_ALPHAS,
                clusters=None) -> dict:
    """AUROC [95% CI], TPR at each α, class counts, NaN count and resolvability of each α.

    clusters: optional per-row group ids (record_id). When a record appears in several rows (scores pooled
    over targets) the CI resamples records (`cluster_auroc_ci`); otherwise a stratified row bootstrap.
    """
    y, s, n_nan = prepare(labels, scores)
    if clusters is not None and pd.Series(clusters).duplicated().any():
        lo, hi = cluster_auroc_ci(y, s, clusters, n_boot=n_boot, seed=seed)
    else:
        lo, hi = auroc_ci(y, s, n_boot=n_boot, seed=seed)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    n_neg = int((~y).sum())
    out = {"auroc": float(roc_auc_score(y, s)), "auroc_lo": lo, "auroc_hi": hi,
           "n_pos": int(y.sum()), "n_neg": n_neg, "n_nan": n_nan}
    for a in alphas:
        out[tpr_key(a)] = float(tpr[fpr <= a].max())
        out[resolvable_key(a)] = bool(a * n_neg >= 1)
    return out


def roc_points(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) of the ROC curve with NaN scores lowest, for plotting."""
    y, s, _ = prepare(labels, scores)
    fpr, tpr, _ = roc_curve(y, s)
    return fpr, tpr
