"""The scores table made ready for metrics: optional columns filled, a display `label` per attack, and scores robust-
z-normalised within each target before they are pooled."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from leakaudit.errors import InputError
from leakaudit.metrics.attack_labels import default_family


def normalise_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """Fill the optional columns (params, family, null_check) and add `label` (attack, + params when needed)."""
    missing = {"record_id", "target", "domain", "attack", "score", "is_member"} - set(scores.columns)
    if missing:
        raise InputError(f"scores table lacks columns {sorted(missing)}", path="scores.parquet")
    df = scores.copy()
    if "params" not in df:
        df["params"] = "{}"
    df["params"] = df["params"].fillna("{}").astype(str)
    if "family" not in df:
        df["family"] = df["attack"].map(default_family)
    df["null_check"] = df["null_check"].fillna(False).astype(bool) if "null_check" in df else False
    n_params = df.groupby("attack")["params"].nunique()
    multi = set(n_params[n_params > 1].index)
    df["label"] = [f"{a} {_compact(p)}" if a in multi else a for a, p in zip(df["attack"], df["params"])]
    return df


def _compact(params: str) -> str:
    try:
        d = json.loads(params)
    except json.JSONDecodeError:
        return params
    return ",".join(f"{k}={v}" for k, v in sorted(d.items())) if isinstance(d, dict) else params


def normalise_within_target(df: pd.DataFrame) -> pd.DataFrame:
    """Scores replaced by a robust z-score within each (domain, target, label): (s − median) / (1.4826 · MAD),
    the SD standing in when the MAD is 0, and 0 when every score is equal; NaN stays NaN (lowest).

    Label-free (reads scores only) and monotone within a target, so every per-target AUROC and ROC is unchanged;
    pooled over targets, every target's scores lie on one scale, as an auditor who calibrates each target on its
    own candidates would have them. Chosen over rank quantiles, which tie every target's top candidate at 1 and
    so leave no threshold at low FPR, and over a plain z-score, which one outlying score can move.
    """
    s = df["score"].astype(np.float64)
    g = s.groupby([df["domain"].astype(str), df["target"].astype(str), df["label"].astype(str)])
    med = g.transform("median")
    mad = (s - med).abs().groupby([df["domain"].astype(str), df["target"].astype(str),
                                   df["label"].astype(str)]).transform("median") * 1.4826
    scale = mad.where(mad > 0, g.transform("std")).fillna(0.0)
    z = ((s - med) / scale.where(scale > 0, 1.0)).where(scale > 0, 0.0).where(s.notna())
    return df.assign(score=z.to_numpy())
