"""The metrics table of a scores table: one row per (attack, target, domain), per (attack, domain) and per attack."""

from __future__ import annotations

import numpy as np
import pandas as pd

from leakaudit.metrics.attack_labels import with_threat_model
from leakaudit.metrics.inputs import SingleClassError
from leakaudit.metrics.keys import DEFAULT_ALPHAS, POOLED, resolvable_key, tpr_key
from leakaudit.metrics.roc import roc_metrics
from leakaudit.metrics.score_table import normalise_scores, normalise_within_target


def summarise(scores: pd.DataFrame, *, n_boot: int = 1000, seed: int = 0, alphas=DEFAULT_ALPHAS) -> pd.DataFrame:
    """One metrics row per (attack, target, domain), per (attack, domain) over targets, per attack over all.

    Columns: null_check, level (target|domain|all), label, attack, params, family, threat_model, target, domain
    (POOLED in pooled rows), n_targets, then the roc_metrics keys.  Pooled rows (domain, all) read the scores after
    `normalise_within_target` (label-free, per target), never raw scores: each target has its own score offset, and
    one threshold across raw scores of several targets is not what the auditor of one target applies. Per-target
    rows are unchanged by it. Rows of null targets are summarised among themselves only. A group with a single
    class gets NaN metrics (its counts are kept).
    """
    df = with_threat_model(normalise_scores(scores))
    keys = ["label", "attack", "params", "family", "threat_model"]
    rows = []
    for null_check, part in df.groupby("null_check", sort=True):
        pooled = normalise_within_target(part)
        for level, by in (("target", ["target", "domain"]), ("domain", ["domain"]), ("all", [])):
            for key, g in (part if level == "target" else pooled).groupby(keys + by, sort=True):
                row = dict(zip(keys + by, key), null_check=bool(null_check), level=level)
                row.setdefault("target", POOLED)
                row.setdefault("domain", POOLED)
                row["n_targets"] = int(g["target"].nunique())
                row.update(_safe_metrics(g, n_boot=n_boot, seed=seed, alphas=alphas))
                rows.append(row)
    cols = ["null_check", "level", "label", "attack", "params", "family", "threat_model", "target", "domain",
            "n_targets"]
    out = pd.DataFrame(rows)
    return out[cols + [c for c in out.columns if c not in cols]].reset_index(drop=True)


def _safe_metrics(g: pd.DataFrame, *, n_boot: int, seed: int, alphas) -> dict:
    try:
        return roc_metrics(g["is_member"].to_numpy(), g["score"].to_numpy(), n_boot=n_boot, seed=seed,
                           alphas=alphas, clusters=g["record_id"].to_numpy())
    except SingleClassError:
        n_pos = int(g["is_member"].astype(bool).sum())
        out = {"auroc": np.nan, "auroc_lo": np.nan, "auroc_hi": np.nan, "n_pos": n_pos,
               "n_neg": len(g) - n_pos, "n_nan": int(g["score"].isna().sum())}
        for a in alphas:
            out[tpr_key(a)] = np.nan
            out[resolvable_key(a)] = False
        return out
