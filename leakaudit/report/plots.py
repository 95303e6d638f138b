"""Seaborn figures of a study's scores and metrics; each function returns a Figure, `save_png` writes it."""

from __future__ import annotations

from pathlib import Path

import os

import matplotlib

if not os.environ.get("MPLBACKEND"):  # headless by default; notebooks (ipykernel sets MPLBACKEND) keep theirs
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from leakaudit.io import atomic_path  # noqa: E402
from leakaudit.metrics import SingleClassError, roc_points  # noqa: E402


def save_png(fig: plt.Figure, path: Path, *, dpi: int = 110) -> Path:
    """Write `fig` atomically as PNG and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def roc_curves(scores: pd.DataFrame) -> pd.DataFrame:
    """Long table of ROC points (label, fpr, tpr) per attack label over the given rows (labelled only)."""
    parts = []
    for label, g in scores.dropna(subset=["is_member"]).groupby("label", sort=True):
        try:
            fpr, tpr = roc_points(g["is_member"].astype(bool).to_numpy(), g["score"].to_numpy())
        except SingleClassError:
            continue
        parts.append(pd.DataFrame({"label": label, "fpr": fpr, "tpr": tpr}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["label", "fpr", "tpr"])


FAMILY_PALETTES = {"fresh": "Blues_r", "fixed": "Oranges_r", "blind": "Greys_r", "other": "Purples_r"}
"""One colour family per attack family (shades within it): same-trajectory blue, fixed-text orange, blind grey; purple
for what is no one attack (the paper's per-target maximum over baselines) or of an unknown family."""
MAX_CURVES = 6
"""Curves per ROC panel: more are not told apart."""


def family_colours(labels: list[str], families: dict[str, str]) -> dict[str, tuple]:
    """label -> colour: each family's labels get shades of its FAMILY_PALETTES entry (unknown family: 'other')."""
    def family(lab: str) -> str:
        return families.get(lab) if families.get(lab) in FAMILY_PALETTES else "other"

    out: dict[str, tuple] = {}
    for fam in dict.fromkeys(family(lab) for lab in labels):
        members = [lab for lab in labels if family(lab) == fam]
        shades = sns.color_palette(FAMILY_PALETTES[fam], len(members) + 2)
        out.update(zip(members, shades))
    return out


def roc_figure(scores: pd.DataFrame, *, title: str = "", labels: list[str] | None = None) -> plt.Figure:
    """ROC of the attack `labels` (default: every label in `scores`) over `scores` pooled, on linear axes (left) and
    log-log axes (right); one colour family per attack family, the legend outside the panels. The report passes its
    headline's attacks (at most MAX_CURVES) and scores normalised within each target
    (leakaudit.metrics.normalise_within_target)."""
    sns.set_theme(style="whitegrid")
    labels = list(dict.fromkeys(labels if labels is not None else sorted(scores["label"].unique())))
    scores = scores[scores["label"].isin(labels)]
    curves = roc_curves(scores)
    families = dict(zip(scores["label"], scores["family"])) if "family" in scores else {}
    palette = family_colours([lab for lab in labels if lab in set(curves["label"])], families)
    n_neg = int((~scores["is_member"].astype(bool)).sum() / max(scores["label"].nunique(), 1))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, log in zip(axes, (False, True)):
        sns.lineplot(data=curves, x="fpr", y="tpr", hue="label", hue_order=list(palette), palette=palette,
                     estimator=None, sort=False, ax=ax, drawstyle="steps-post", legend=log)
        lo = min(1e-3, 0.5 / max(n_neg, 1)) if log else 0.0
        ax.plot([max(lo, 1e-9), 1], [max(lo, 1e-9), 1], ls="--", c="grey", lw=1)
        if log:
            ax.set(xscale="log", yscale="log", xlim=(lo, 1), ylim=(lo, 1.02))
        else:
            ax.set(xlim=(0, 1), ylim=(0, 1.01))
        ax.set(xlabel="false positive rate", ylabel="true positive rate",
               title=("log-log" if log else "linear") + (f" — {title}" if title else ""))
    if axes[1].get_legend() is not None:
        sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.02, 1), title="attack", fontsize=8)
    fig.tight_layout()
    return fig


def score_distribution_figure(scores: pd.DataFrame, labels: list[str]) -> plt.Figure:
    """Histograms of member vs non-member scores, one column per attack label, one row per domain."""
    sns.set_theme(style="whitegrid")
    df = scores[scores["label"].isin(labels)].dropna(subset=["is_member"]).copy()
    df["membership"] = np.where(df["is_member"].astype(bool), "member", "non-member")
    grid = sns.displot(df, x="score", hue="membership", row="domain", col="label", col_order=labels,
                       kind="hist", stat="density", common_norm=False, element="step", bins=20,
                       height=2.6, aspect=1.3, facet_kws={"sharex": "col", "sharey": False},
                       hue_order=["member", "non-member"])
    grid.set_titles("{row_name} | {col_name}")
    return grid.figure


def auroc_bars_figure(headline: pd.DataFrame, families: dict[str, str] | None = None) -> plt.Figure:
    """Per-domain AUROC bars with 95% CI error bars: Leaky vs the best baseline of each family. `families` (attack
    label -> family): each row coloured as its attack's family (family_colours), as the ROC panels; else seaborn's
    default colours."""
    sns.set_theme(style="whitegrid")
    domains = list(dict.fromkeys(headline["domain"]))
    methods = list(dict.fromkeys(headline["method"]))
    full = (pd.MultiIndex.from_product([domains, methods], names=["domain", "method"]).to_frame(index=False)
            .merge(headline, on=["domain", "method"], how="left"))
    palette = None
    if families is not None:
        attack_of = dict(zip(headline["method"], headline["attack"]))
        palette = family_colours(methods, {m: families.get(attack_of[m], "other") for m in methods})
    fig, ax = plt.subplots(figsize=(max(3.5, 0.5 * len(domains) * len(methods)) + 4, 4.2))  # + the legend
    sns.barplot(data=full, x="domain", y="auroc", hue="method", order=domains, hue_order=methods, palette=palette,
                saturation=1, errorbar=None, ax=ax)  # saturation 1: the ROC curves' very colours
    for container, method in zip(ax.containers, methods):
        sub = full[full["method"] == method].set_index("domain").loc[domains]
        x = [bar.get_x() + bar.get_width() / 2 for bar in container]
        y = sub["auroc"].to_numpy(float)
        err = np.vstack([y - sub["auroc_lo"].to_numpy(float), sub["auroc_hi"].to_numpy(float) - y])
        ax.errorbar(x, y, yerr=np.nan_to_num(err), fmt="none", ecolor="black", capsize=3, lw=1)
    ax.axhline(0.5, ls="--", c="grey", lw=1)
    ax.set(ylim=(0, 1.05), ylabel="AUROC (95% CI)", xlabel="domain", title="AUROC per domain")
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1, 1), title=None)
    fig.tight_layout()
    return fig


def null_check_figure(null_rows: pd.DataFrame) -> plt.Figure:
    """Null-target AUROC with 95% CI per attack; every interval should contain 0.5."""
    sns.set_theme(style="whitegrid")
    d = null_rows.sort_values("label")
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(d) + 1.4))
    sns.scatterplot(data=d, x="auroc", y="label", ax=ax, s=40, color="C0", zorder=3)
    ax.hlines(d["label"], d["auroc_lo"], d["auroc_hi"], color="C0", lw=2)
    ax.axvline(0.5, ls="--", c="grey", lw=1)
    ax.set(xlim=(0, 1), xlabel="AUROC on null target (95% CI)", ylabel="", title="Null check")
    fig.tight_layout()
    return fig
