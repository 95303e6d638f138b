"""The published statistic and its uncertainty: the mean over targets of each target's AUROC.

An auditor holds ONE target and ranks its candidates; the paper reports the mean over targets of that per-target
AUROC. Pooling raw scores of several targets under one threshold asks another question: each target carries its
own score offset (a Leaky score is a target's distance to its references on its own samples), so a pooled AUROC
mixes the member effect with between-target offsets. Here:

- `mean_target_table`: per attack, the mean over targets of the per-target AUROC, a 95% percentile CI from a
  TWO-LEVEL bootstrap (targets drawn with replacement, then, inside each drawn target, members and non-members
  drawn with replacement separately, so every resample has both classes), and the paired difference of the primary
  attack minus every other attack on the SAME resamples. Two pseudo-attacks give the paper's "strongest baseline
  per target" (the max over baselines of each target's AUROC, chosen after seeing that target's labels) under the
  same resamples.
- `normalise_within_target`: the label-free per-target normalisation used before any pooling: each score is
  replaced by its mid-rank quantile among the target's candidates (rank / n, NaN lowest). AUROC within a target
  is unchanged by it; pooled over targets, every target contributes scores on one scale.

Every attack carries a threat model (`threat_model`): OUT-only (references trained without the candidate, or no
references: what an auditor can have) or IN+OUT (online LiRA / RMIA, which also train references ON the candidate:
a stronger adversary). The blind text baseline reads the labels and is a check, not an attack.

Hand-written bootstrap (not scipy.stats.bootstrap): scipy resamples one level of observations; here targets and the
records inside them are resampled together and the same draws serve every attack (paired).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from attacks.registry import THREAT_MODELS
from leakaudit.errors import ConfigError
from leakaudit.metrics import (DEFAULT_ALPHAS, POOLED, _auc_statistic, attack_base, format_ci, fpr_label,
                               primary_leaky, resolvable_key, tpr_key, with_threat_model)

OUT_ONLY, IN_OUT, CHECK = THREAT_MODELS
PAPER_MAX = "max OUT-only baseline per target"
"""Pseudo-attack: per target, the highest AUROC of any OUT-only baseline (the paper's 'strongest baseline')."""
PAPER_MAX_FRESH = "max same-trajectory baseline per target"
"""Pseudo-attack: the same maximum over the baselines scored on the target's fresh trajectories."""
PAPER_MAX_ANY = "max baseline per target (any threat model)"
"""Pseudo-attack: the maximum over every baseline, online (IN+OUT) ones included, as a paper that mixes them."""


@dataclass(frozen=True)
class TargetScores:
    """One target's candidates: labels y [n] bool and scores [A, n] (attack labels in `labels` order; NaN lowest)."""

    key: tuple[str, str]
    y: np.ndarray
    scores: np.ndarray


def target_matrices(df: pd.DataFrame, labels: list[str]) -> list[TargetScores]:
    """Per (domain, target): the candidates' labels and one score row per attack label (a missing row: NaN).

    df: real-target rows with domain, target, label, record_id, score, is_member. A target whose candidates are
    all members or all non-members is left out (it has no AUROC)."""
    out = []
    for key, g in df.groupby(["domain", "target"], sort=True):
        wide = g.pivot_table(index="record_id", columns="label", values="score", aggfunc="first", dropna=False)
        wide = wide.reindex(columns=labels)
        y = g.groupby("record_id")["is_member"].first().reindex(wide.index).astype(bool).to_numpy()
        if y.all() or not y.any():
            continue
        s = wide.to_numpy(dtype=np.float64).T
        out.append(TargetScores((str(key[0]), str(key[1])), y, np.where(np.isnan(s), -np.inf, s)))
    return out


def _auc_rows(scores: np.ndarray, pos_idx: np.ndarray, neg_idx: np.ndarray) -> np.ndarray:
    """AUROC of every attack on every resample: scores [A, n], pos_idx [S, P], neg_idx [S, N] -> [A, S]."""
    return _auc_statistic(scores[:, pos_idx], scores[:, neg_idx])


def per_target_auroc(targets: list[TargetScores]) -> np.ndarray:
    """[A, K]: each attack's AUROC on each target (ties ½, NaN lowest)."""
    cols = []
    for t in targets:
        pos, neg = np.flatnonzero(t.y), np.flatnonzero(~t.y)
        cols.append(_auc_rows(t.scores, pos[None, :], neg[None, :])[:, 0])
    return np.stack(cols, axis=1)


def two_level_bootstrap(targets: list[TargetScores], *, n_boot: int, seed: int) -> np.ndarray:
    """[A, B, K]: per-target AUROC of every attack on B two-level resamples of K target slots.

    Each slot of each resample draws a target uniformly with replacement, then that target's members and
    non-members with replacement (separately, keeping both counts). The draws are shared by every attack (paired).
    Seeded by numpy's default_rng(seed)."""
    rng = np.random.default_rng(seed)
    k = len(targets)
    slots = rng.integers(0, k, size=(n_boot, k))                              # [B, K] target of each slot
    out = np.empty((targets[0].scores.shape[0], n_boot, k))
    for i, t in enumerate(targets):
        b, j = np.nonzero(slots == i)
        if len(b) == 0:
            continue
        pos, neg = np.flatnonzero(t.y), np.flatnonzero(~t.y)
        pos_idx = pos[rng.integers(0, len(pos), size=(len(b), len(pos)))]
        neg_idx = neg[rng.integers(0, len(neg), size=(len(b), len(neg)))]
        out[:, b, j] = _auc_rows(t.scores, pos_idx, neg_idx)
    return out


def mean_target_table(df: pd.DataFrame, *, n_boot: int, seed: int, primary: str | None = None,
                      level: float = 0.95) -> pd.DataFrame:
    """One row per attack label of one scope (a domain, or every domain together): the mean per-target AUROC.

    df: real-target rows (normalise_scores' columns; threat_model added when absent). primary: the attack the
    paired differences are taken against (default: `primary_leaky`). Columns: label, attack, family,
    threat_model, n_targets, auroc (mean over targets of the per-target AUROC), auroc_lo, auroc_hi (two-level
    bootstrap percentile CI), sd_targets (SD of the per-target AUROCs), primary, delta (primary − this row: > 0 means
    the primary attack is stronger), delta_lo, delta_hi, p_le_0 (share of resamples with delta ≤ 0: a one-sided
    bootstrap p-value for 'primary beats this'), n_boot. The PAPER_MAX / PAPER_MAX_FRESH / PAPER_MAX_ANY rows are the
    per-target maxima over baselines (every label but Leaky's and the blind check), as published, with no interval:
    a maximum is biased upward under resampling (each resample re-selects the luckiest baseline), so its percentile
    interval does not even cover the point estimate; the selection-free comparison is a single baseline chosen on
    a development run (`choose_baseline`). n_boot == 0 gives NaN intervals.
    """
    if "threat_model" not in df:
        df = with_threat_model(df)
    info = df.drop_duplicates("label").set_index("label")[["attack", "family", "threat_model"]]
    labels = sorted(info.index)
    primary = primary if primary is not None else primary_leaky(labels)
    targets = target_matrices(df, labels)
    if not targets:
        return pd.DataFrame()
    baseline = [lab for lab in labels if attack_base(lab) != "leaky" and info.at[lab, "family"] != "blind"]
    groups = {PAPER_MAX: [lab for lab in baseline if info.at[lab, "threat_model"] == OUT_ONLY],
              PAPER_MAX_FRESH: [lab for lab in baseline if info.at[lab, "threat_model"] == OUT_ONLY
                                and info.at[lab, "family"] == "fresh"],
              PAPER_MAX_ANY: baseline if any(info.at[lab, "threat_model"] == IN_OUT for lab in baseline) else []}
    groups = {name: [labels.index(lab) for lab in members] for name, members in groups.items() if members}

    def with_maxima(auc: np.ndarray) -> np.ndarray:  # [A, ...] -> [A + len(groups), ...]
        return np.concatenate([auc] + [auc[idx].max(axis=0, keepdims=True) for idx in groups.values()], axis=0)

    names = labels + list(groups)
    point_t = with_maxima(per_target_auroc(targets))                           # [A', K]
    point = point_t.mean(axis=1)
    boot = with_maxima(two_level_bootstrap(targets, n_boot=n_boot, seed=seed)).mean(axis=2) if n_boot > 0 else None
    tail = (1 - level) / 2 * 100
    p_row = names.index(primary) if primary in names else None
    rows = []
    for a, name in enumerate(names):
        pseudo = name in groups
        row = {"label": name, "attack": name if pseudo else info.at[name, "attack"],
               "family": "per-target max" if pseudo else info.at[name, "family"],
               "threat_model": (IN_OUT if name == PAPER_MAX_ANY else OUT_ONLY) if pseudo
               else info.at[name, "threat_model"],
               "n_targets": len(targets), "auroc": point[a], "auroc_lo": np.nan, "auroc_hi": np.nan,
               "sd_targets": float(point_t[a].std(ddof=1)) if len(targets) > 1 else np.nan,
               "primary": primary, "delta": np.nan, "delta_lo": np.nan, "delta_hi": np.nan, "p_le_0": np.nan,
               "n_boot": int(n_boot)}
        if boot is not None and not pseudo:
            row["auroc_lo"], row["auroc_hi"] = np.percentile(boot[a], [tail, 100 - tail])
        if p_row is not None and a != p_row:
            row["delta"] = point[p_row] - point[a]
            if boot is not None and not pseudo:
                d = boot[p_row] - boot[a]
                row["delta_lo"], row["delta_hi"] = np.percentile(d, [tail, 100 - tail])
                row["p_le_0"] = float(np.mean(d <= 0))
        rows.append(row)
    return pd.DataFrame(rows)


def mean_target_tables(df: pd.DataFrame, *, n_boot: int, seed: int, primary: str | None = None) -> pd.DataFrame:
    """`mean_target_table` per domain and over every domain ('all'), for real targets and, separately, null
    targets (null_check True: what the same statistics read with no member signal). Adds null_check and domain."""
    if "threat_model" not in df:
        df = with_threat_model(df)
    frames = []
    for null_check, part in df.groupby(df["null_check"].astype(bool), sort=True):
        scopes = [(d, part[part["domain"] == d]) for d in sorted(part["domain"].unique())]
        if len(scopes) > 1:
            scopes.append(("all", part))
        for domain, g in scopes:
            t = mean_target_table(g, n_boot=n_boot, seed=seed, primary=primary)
            if not t.empty:
                frames.append(t.assign(null_check=bool(null_check), domain=domain))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    first = ["null_check", "domain"]
    return out[first + [c for c in out.columns if c not in first]]


def choose_baseline(table: pd.DataFrame, *, threat: str = OUT_ONLY, family: str | None = None) -> str | None:
    """The single baseline with the highest mean per-target AUROC in one scope's `mean_target_table` (Leaky, the
    blind check and the per-target maxima excluded), of the given threat model and optionally family."""
    t = table[(table["label"].map(attack_base) != "leaky") & ~table["family"].isin(["blind", "per-target max"])
              & (table["threat_model"] == threat)]
    if family is not None:
        t = t[t["family"] == family]
    t = t.dropna(subset=["auroc"])
    return None if t.empty else str(t.loc[t["auroc"].idxmax(), "label"])


def check_choice(label: str, table: pd.DataFrame, *, where: str) -> None:
    """A baseline chosen elsewhere (a development seed) must exist in the table it is read on."""
    if label not in set(table["label"]):
        raise ConfigError(f"the baseline chosen on the development run, {label!r}, is not among {where}'s attacks")


def ci_text(x: float, lo: float, hi: float, *, signed: bool = False) -> str:
    """'0.715 [0.670, 0.758]' (metrics.format_ci), '+0.082 [+0.024, +0.140]' when signed; 'n/a' without a value."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "n/a"
    if not signed:
        return format_ci(x, lo, hi)
    if lo is None or np.isnan(lo):
        return f"{x:+.3f}"
    return f"{x:+.3f} [{lo:+.3f}, {hi:+.3f}]"


HEADLINE_METHODS = ("Leaky", "best OUT-only baseline", "best same-trajectory baseline (OUT-only)",
                    "best online attack (IN+OUT)", "paper: max OUT-only baseline per target", "blind text (check)")
"""The headline's rows, in order: the attack under test; the OUT-only rivals an auditor could run instead (the
comparison that decides); the online attacks, beside it and labelled (a stronger adversary, references trained ON
the candidate); the paper's per-target maximum; and the blind text check."""


def headline_table(mean_tables: pd.DataFrame, metrics: pd.DataFrame, *, chosen: dict[str, str] | None = None,
                   alphas=(0.01, 0.001)) -> pd.DataFrame:
    """Per domain (and 'all' over several): one row per HEADLINE_METHODS entry, real targets only.

    mean_tables: `mean_target_tables` (mean per-target AUROC, two-level CI, paired Δ = Leaky − this row).
    metrics: `leakaudit.metrics.summarise` rows, whose pooled levels are on per-target-normalised scores: TPR at
    each α and the number of negatives come from them (one threshold over every target's quantiles).
    chosen: method -> attack label fixed elsewhere (on a development run: selection-free); otherwise each 'best'
    row is the highest mean per-target AUROC on these very labels (selection favours the baseline).
    Columns: domain, method, attack, threat_model, n_targets, auroc, auroc_lo, auroc_hi, "mean per-target AUROC
    [95% CI]", delta, delta_lo, delta_hi, "Δ Leaky − this [95% CI]", p_le_0, chosen_on ('these labels' or
    'development run'), TPR@α (normalised pool) per α, n_neg.
    """
    if mean_tables.empty:
        return pd.DataFrame()
    chosen = chosen or {}
    real = mean_tables[~mean_tables["null_check"].astype(bool)]
    m = metrics[~metrics["null_check"].astype(bool)] if not metrics.empty else metrics
    rows = []
    for domain, t in real.groupby("domain", sort=False):
        primary = t["primary"].dropna().iloc[0] if t["primary"].notna().any() else None
        picks = {"Leaky": primary,
                 "best OUT-only baseline": choose_baseline(t, threat=OUT_ONLY),
                 "best same-trajectory baseline (OUT-only)": choose_baseline(t, threat=OUT_ONLY, family="fresh"),
                 "best online attack (IN+OUT)": choose_baseline(t, threat=IN_OUT),
                 "paper: max OUT-only baseline per target": PAPER_MAX,
                 "blind text (check)": next(iter(t.loc[t["family"] == "blind", "label"]), None)}
        for method in HEADLINE_METHODS:
            label = chosen.get(method, picks[method])
            if label is None or label not in set(t["label"]):
                continue
            r = t[t["label"] == label].iloc[0]
            row = {"domain": domain, "method": method, "attack": label, "threat_model": r["threat_model"],
                   "n_targets": int(r["n_targets"]), "auroc": r["auroc"], "auroc_lo": r["auroc_lo"],
                   "auroc_hi": r["auroc_hi"],
                   "mean per-target AUROC [95% CI]": ci_text(r["auroc"], r["auroc_lo"], r["auroc_hi"]),
                   "delta": r["delta"], "delta_lo": r["delta_lo"], "delta_hi": r["delta_hi"],
                   "Δ Leaky − this [95% CI]": "" if method == "Leaky" else
                   ci_text(r["delta"], r["delta_lo"], r["delta_hi"], signed=True),
                   "p_le_0": r["p_le_0"],
                   "chosen_on": "development run" if method in chosen else "these labels"}
            row.update(_pooled_tpr(m, domain, label, alphas))
            rows.append(row)
    return pd.DataFrame(rows)


def _pooled_tpr(metrics: pd.DataFrame, domain: str, label: str, alphas) -> dict:
    """TPR@α on the per-target-normalised pool of one scope, and its n_neg (NaN when not in `metrics`)."""
    out = {f"{fpr_label(a)} (normalised pool)": np.nan for a in alphas} | {"n_neg": np.nan}
    if metrics.empty:
        return out
    level = metrics[(metrics["level"] == "domain") & (metrics["domain"] == domain)] if domain != "all" \
        else metrics[metrics["level"] == "all"]
    hit = level[level["label"] == label]
    if hit.empty:
        return out
    h = hit.iloc[0]
    for a in alphas:
        if tpr_key(a) in h:
            out[f"{fpr_label(a)} (normalised pool)"] = h[tpr_key(a)] if h[resolvable_key(a)] else np.nan
    out["n_neg"] = int(h["n_neg"])
    return out
