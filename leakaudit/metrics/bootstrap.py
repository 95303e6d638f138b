"""Bootstrap confidence intervals of the AUROC: stratified over rows, over clusters (records scored by several
targets), and the paired difference of two attacks on the same records."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.metrics import roc_auc_score

from leakaudit.metrics.auc import _auc_statistic
from leakaudit.metrics.inputs import prepare


def auroc_ci(y: np.ndarray, s: np.ndarray, *, n_boot: int, seed: int, level: float = 0.95) -> tuple[float, float]:
    """Stratified percentile bootstrap CI of the AUROC; NaN when n_boot == 0 or a class has < 2 records.
    `y` is read as bool (0/1 ints were taken as indices before, a CI of other rows), `s` as float."""
    y, s = np.asarray(y, dtype=bool), np.asarray(s, dtype=np.float64)
    pos, neg = s[y], s[~y]
    if n_boot <= 0 or len(pos) < 2 or len(neg) < 2:
        return float("nan"), float("nan")
    res = stats.bootstrap((pos, neg), _auc_statistic, n_resamples=n_boot, vectorized=True, paired=False,
                          confidence_level=level, method="percentile", batch=200,
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _cluster_draws(n_clusters: int, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n_clusters] float counts: how often each cluster was drawn (with replacement) in each resample."""
    rng = np.random.default_rng(seed)
    return np.stack([np.bincount(rng.integers(0, n_clusters, n_clusters), minlength=n_clusters)
                     for _ in range(n_boot)]).astype(np.float64)


def _weighted_auroc(y: np.ndarray, s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """AUROC under row weights w [B, rows]: w_pos^T C w_neg / (Σw_pos Σw_neg), with
    C[i, j] = 1[s_i > s_j] + ½·1[s_i = s_j]. Returns [B], NaN where a resample holds no member or no non-member."""
    pos, neg = s[y], s[~y]
    comp = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])  # [P, N]
    wp, wn = w[:, y], w[:, ~y]
    num = np.einsum("bp,pn,bn->b", wp, comp, wn)
    den = wp.sum(1) * wn.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def cluster_auroc_ci(y: np.ndarray, s: np.ndarray, clusters, *, n_boot: int, seed: int,
                     level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the AUROC resampling CLUSTERS (records), not rows.

    When scores are pooled over targets, each record contributes one row per target (a member of some, a
    non-member of others) and those rows are correlated; resampling rows would treat them as independent and
    give too narrow an interval. Each resample draws records with replacement and weights every row by how often
    its record was drawn (`_weighted_auroc`). Hand-written (scipy.stats.bootstrap resamples observations, not
    groups); vectorised over resamples.
    """
    if n_boot <= 0:
        return float("nan"), float("nan")
    y, s = np.asarray(y, dtype=bool), np.asarray(s, dtype=np.float64)  # 0/1 ints would index, as in auroc_ci
    codes, uniq = pd.factorize(pd.Series(clusters), sort=True)
    w = _cluster_draws(len(uniq), n_boot, seed)[:, codes]                     # [B, rows]
    auc = _weighted_auroc(y, s, w)
    auc = auc[~np.isnan(auc)]
    if len(auc) < 2:
        return float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    return float(np.percentile(auc, tail)), float(np.percentile(auc, 100 - tail))


def paired_auroc_difference(a: pd.DataFrame, b: pd.DataFrame, *, n_boot: int, seed: int,
                            level: float = 0.95) -> dict:
    """AUROC(a) − AUROC(b) of two attacks scored on the same records, with a PAIRED cluster-bootstrap CI.

    a, b: rows with record_id, is_member, score (NaN score = lowest, as everywhere). Each resample draws the
    records of both frames together (one draw of the union of their record_ids, as `cluster_auroc_ci` draws them),
    so what the two attacks share (the same hard and easy records) cancels in the difference: the paired CI is
    the test of "a beats b" that two separate CIs only approximate (two CIs can overlap while the paired
    difference's CI excludes 0).
    Returns delta (> 0: a is stronger), delta_lo, delta_hi (NaN when n_boot == 0), frac_boot_le_0 (the share of
    resamples with a difference ≤ 0: a one-sided bootstrap p-value for "a beats b") and n_boot used.
    """
    ya, sa, _ = prepare(a["is_member"].to_numpy(), a["score"].to_numpy())
    yb, sb, _ = prepare(b["is_member"].to_numpy(), b["score"].to_numpy())
    delta = float(roc_auc_score(ya, sa) - roc_auc_score(yb, sb))
    out = {"delta": delta, "delta_lo": float("nan"), "delta_hi": float("nan"), "frac_boot_le_0": float("nan"),
           "n_boot": 0}
    if n_boot <= 0:
        return out
    ids = pd.concat([a["record_id"], b["record_id"]], ignore_index=True).astype(str)
    codes, uniq = pd.factorize(ids, sort=True)
    w = _cluster_draws(len(uniq), n_boot, seed)                               # [B, clusters], shared by a and b
    d = _weighted_auroc(ya, sa, w[:, codes[:len(a)]]) - _weighted_auroc(yb, sb, w[:, codes[len(a):]])
    d = d[~np.isnan(d)]
    if len(d) < 2:
        return out
    tail = (1 - level) / 2 * 100
    return {**out, "delta_lo": float(np.percentile(d, tail)), "delta_hi": float(np.percentile(d, 100 - tail)),
            "frac_boot_le_0": float(np.mean(d <= 0)), "n_boot": int(len(d))}
