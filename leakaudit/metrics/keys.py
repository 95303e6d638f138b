"""The metric keys of metrics.json / metrics.csv and their display forms: `tpr@<alpha>`, `resolvable@<alpha>`,
"TPR@<percent>%", the levels of a summary and the value of `target` / `domain` in its pooled rows."""

from __future__ import annotations

import numpy as np


DEFAULT_ALPHAS = (0.1, 0.01, 0.001)
LEVELS = ("target", "domain", "all")
POOLED = "*"  # value of `target` / `domain` in pooled rows


def tpr_key(alpha: float) -> str:
    """Dict / column key of TPR at FPR α, e.g. 0.01 -> 'tpr@0.01'."""
    return f"tpr@{alpha:g}"


def resolvable_key(alpha: float) -> str:
    return f"resolvable@{alpha:g}"


def fpr_label(alpha: float) -> str:
    """Display label, e.g. 0.001 -> 'TPR@0.1%'."""
    return f"TPR@{alpha * 100:g}%"


def format_ci(x: float, lo: float, hi: float) -> str:
    if np.isnan(lo):
        return f"{x:.3f}"
    return f"{x:.3f} [{lo:.3f}, {hi:.3f}]"
