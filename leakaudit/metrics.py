"""Membership-inference metrics: AUROC with a bootstrap CI, TPR at low FPR, and per-level summaries.

Conventions (one definition each, used everywhere in leakaudit):
- higher score = more likely member; a NaN score counts as the lowest possible score (reported as `n_nan`);
- TPR at FPR α = the largest TPR over the ROC thresholds whose FPR ≤ α (no interpolation between points,
  ties are one threshold), from `sklearn.metrics.roc_curve`;
- the AUROC CI is a 95% percentile bootstrap over records, *stratified* by label: members and non-members are
  resampled separately (`scipy.stats.bootstrap` with two independent samples), so every resample keeps
  n_pos and n_neg and is never single-class.  Seeded by `seed`.
- TPR at α is "resolvable" only when α · n_neg ≥ 1 (at least one false positive is allowed).

Permutation nulls (`permutation_null`): a one-sided test of several statistics under one set of relabellings,
exact when there are few distinct relabellings, else seeded draws; used for the blind text baseline
(leakaudit/report/blind_null.py).

Metric dict keys follow docs/contracts.md: `tpr@0.1`, `tpr@0.01`, `tpr@0.001` (α as a fraction) and
`resolvable@<α>`; `fpr_label(α)` gives the display form ("TPR@1%").
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.metrics import roc_auc_score, roc_curve

from attacks.errors import AttackConfigError
from attacks.registry import get_attack
from leakaudit.errors import InputError

DEFAULT_ALPHAS = (0.1, 0.01, 0.001)
LEVELS = ("target", "domain", "all")
POOLED = "*"  # value of `target` / `domain` in pooled rows


class SingleClassError(InputError):
    """Metrics need both members and non-members."""


def tpr_key(alpha: float) -> str:
    """Dict / column key of TPR at FPR α, e.g. 0.01 -> 'tpr@0.01'."""
    return f"tpr@{alpha:g}"


def resolvable_key(alpha: float) -> str:
    return f"resolvable@{alpha:g}"


def fpr_label(alpha: float) -> str:
    """Display label, e.g. 0.001 -> 'TPR@0.1%'."""
    return f"TPR@{alpha * 100:g}%"


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


def tpr_at_fpr(labels, scores, alpha: float) -> float:
    """Largest TPR over thresholds with FPR ≤ alpha (NaN scores lowest)."""
    y, s, _ = prepare(labels, scores)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return float(tpr[fpr <= alpha].max())


def _auc_statistic(pos: np.ndarray, neg: np.ndarray, axis: int = -1) -> np.ndarray:
    """Vectorised Mann–Whitney AUROC (ties count ½), for scipy.stats.bootstrap; equals roc_auc_score."""
    pos, neg = np.moveaxis(pos, axis, -1), np.moveaxis(neg, axis, -1)
    n_pos, n_neg = pos.shape[-1], neg.shape[-1]
    ranks = stats.rankdata(np.concatenate([pos, neg], axis=-1), axis=-1)
    return (ranks[..., :n_pos].sum(axis=-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


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


def default_family(attack: str) -> str:
    """Family when scores.parquet has no `family` column: blind_* -> blind, fresh-trajectory names -> fresh (either
    reference design: 'leaky@offline' is fresh as 'leaky' is)."""
    attack = attack_base(attack)
    if attack.startswith("blind"):
        return "blind"
    if attack == "leaky" or attack.startswith(("fresh", "same_traj", "mean_gap", "gap_")):
        return "fresh"
    return "fixed"


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


REFERENCE_DESIGN_SEP = "@"
"""An attack label '<attack>@<design>' is that attack with another reference design (leakaudit.scoring:
'@offline' = the domain's offline references)."""


def attack_base(label: str) -> str:
    """'leaky@offline' -> 'leaky': the attack a label names, whichever references it used."""
    return str(label).split(REFERENCE_DESIGN_SEP, 1)[0]


def threat_model(attack_name: str, params: str | dict | None = None) -> str:
    """'OUT-only', 'IN+OUT' or 'check' (attacks.registry.THREAT_MODELS) of a registered attack and its parameters
    (a JSON string or a dict), as the attack declared it at registration; 'unknown' for an attack this version does
    not register (scores written by another version or by hand)."""
    try:
        spec = get_attack(attack_base(attack_name))
    except AttackConfigError:
        return "unknown"
    if isinstance(params, str):
        params = json.loads(params or "{}")
    known = {f.name for f in dataclasses.fields(spec.params_cls)}
    return spec.threat_model_of({k: v for k, v in (params or {}).items() if k in known})


def with_threat_model(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (normalise_scores' columns) with a `threat_model` column, looked up once per (attack, params)."""
    name = df["attack_name"] if "attack_name" in df else df["attack"].map(attack_base)
    keys = list(zip(name.astype(str), df["params"].astype(str)))
    cache = {k: threat_model(*k) for k in set(keys)}
    return df.assign(threat_model=[cache[k] for k in keys])


def primary_leaky(labels) -> str | None:
    """The attack under test: Leaky with offline references when the run has them (the published design: references
    trained without any candidate), else with the study's matched OUT references; None without a Leaky row."""
    labels = set(map(str, labels))
    for label in (f"leaky{REFERENCE_DESIGN_SEP}offline", "leaky"):
        if label in labels:
            return label
    return None


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


def format_ci(x: float, lo: float, hi: float) -> str:
    if np.isnan(lo):
        return f"{x:.3f}"
    return f"{x:.3f} [{lo:.3f}, {hi:.3f}]"


# ---- permutation nulls ---------------------------------------------------------------------------------------
def auroc(labels, scores) -> float:
    """Mann–Whitney AUROC (ties count ½; equals roc_auc_score) of bool labels and finite scores."""
    y = np.asarray(labels, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    return float(_auc_statistic(s[y], s[~y]))


def n_arrangements(codes) -> int:
    """How many distinct orderings the multiset `codes` has: n! / prod(m_c!) over the multiplicities m_c."""
    _, counts = np.unique(np.asarray(codes), return_counts=True)
    out, left = 1, int(counts.sum())
    for m in counts:
        out *= math.comb(left, int(m))
        left -= int(m)
    return out


def distinct_arrangements(codes) -> Iterator[np.ndarray]:
    """Every distinct ordering of the multiset `codes`, each once, in lexicographic order.

    Hand-written (the classical next-permutation step): itertools.permutations yields n! orderings, repeating each
    distinct one prod(m_c!) times, and neither numpy nor scipy enumerates the permutations of a multiset."""
    a = np.sort(np.asarray(codes))
    n = len(a)
    while True:
        yield a.copy()
        i = n - 2
        while i >= 0 and a[i] >= a[i + 1]:
            i -= 1
        if i < 0:
            return
        j = n - 1
        while a[j] <= a[i]:
            j -= 1
        a[i], a[j] = a[j], a[i]
        a[i + 1:] = a[i + 1:][::-1].copy()


@dataclass(frozen=True)
class PermutationNull:
    """A one-sided (greater) permutation test of K statistics sharing one set of relabellings.

    observed [K]; null [n, K] (one row per relabelling); p_value [K]; exact: the n rows are every distinct
    relabelling (p = share of them at or above the observed value, which includes the observed labelling), else
    n random ones (p = (1 + count) / (1 + n), Phipson & Smyth 2010, as scipy.stats.permutation_test); seed: the
    numpy Generator seed of the random relabellings (unused when exact)."""

    observed: np.ndarray
    null: np.ndarray
    p_value: np.ndarray
    exact: bool
    n: int
    seed: int

    def interval(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Central `level` interval of each statistic's null (numpy's default linear quantiles)."""
        tail = (1 - level) / 2
        return np.quantile(self.null, tail, axis=0), np.quantile(self.null, 1 - tail, axis=0)


def permutation_null(statistic: Callable[[list[np.ndarray]], Sequence[float]], codes: Sequence[np.ndarray],
                     observed, *, n_perm: int, seed: int, exact: bool | None = None) -> PermutationNull:
    """Null distribution of `statistic` when the items of each group are relabelled at random.

    codes: per group, an int array [n_g] (items with equal codes are interchangeable: e.g. candidates with the same
    column of the keep matrix). A relabelling permutes every group's codes independently; `statistic(arranged)`
    gets the list of permuted code arrays and returns K values. `observed` [K] is the statistic of the real labels.
    exact: enumerate every distinct relabelling (prod over groups of n_g! / prod m_c!); None = exactly when there
    are at most n_perm of them, else n_perm random permutations drawn from numpy's default_rng(seed).

    Hand-written rather than scipy.stats.permutation_test: one permutation of a domain's records must relabel all of
    its targets at once, domains may differ in size (scipy's 'pairings' needs equal-sized samples) and the
    statistic returns several values; scipy's exact mode would also enumerate all n! orderings instead of the
    distinct ones. The p-value and tie conventions are scipy's (tolerance 100 eps |observed|; +1 only when
    sampled); tests/test_blind_null.py checks the two agree on one target.
    """
    codes = [np.asarray(c) for c in codes]
    observed = np.atleast_1d(np.asarray(observed, dtype=np.float64))
    total = math.prod(n_arrangements(c) for c in codes)
    if exact is None:
        exact = total <= n_perm
    if exact:
        arrangements: Iterable = itertools.product(*(distinct_arrangements(c) for c in codes))
    else:
        if n_perm < 1:
            raise InputError(f"permutation_null: n_perm must be >= 1, got {n_perm}")
        rng = np.random.default_rng(seed)
        arrangements = ([c[rng.permutation(len(c))] for c in codes] for _ in range(n_perm))
    null = np.array([np.asarray(statistic(list(a)), dtype=np.float64).reshape(-1) for a in arrangements])
    null = null.reshape(len(null), len(observed))
    ge = (null >= observed - np.abs(observed) * 100 * np.finfo(np.float64).eps).sum(axis=0)
    adj = 0 if exact else 1
    p = np.clip((ge + adj) / (len(null) + adj), 0.0, 1.0)
    return PermutationNull(observed, null, p, bool(exact), len(null), seed)
