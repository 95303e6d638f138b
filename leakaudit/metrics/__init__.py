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

The parts, one job each, from the bottom: ``keys`` (metric keys and display forms), ``inputs`` (labels and scores
checked and ranked), ``auc`` (the Mann-Whitney AUROC), ``bootstrap`` (its confidence intervals), ``roc`` (one
group's metrics), ``attack_labels`` (attack, family and threat model of a label), ``score_table`` (the scores table
normalised), ``summary`` (the metrics table) and ``permutation`` (permutation nulls).
"""

from leakaudit.metrics.attack_labels import (REFERENCE_DESIGN_SEP, attack_base, default_family, primary_leaky,
                                             threat_model, with_threat_model)
from leakaudit.metrics.auc import _auc_statistic, auroc
from leakaudit.metrics.bootstrap import (_cluster_draws, _weighted_auroc, auroc_ci, cluster_auroc_ci,
                                         paired_auroc_difference)
from leakaudit.metrics.inputs import SingleClassError, prepare
from leakaudit.metrics.keys import DEFAULT_ALPHAS, LEVELS, POOLED, format_ci, fpr_label, resolvable_key, tpr_key
from leakaudit.metrics.permutation import PermutationNull, distinct_arrangements, n_arrangements, permutation_null
from leakaudit.metrics.roc import roc_metrics, roc_points, tpr_at_fpr
from leakaudit.metrics.score_table import normalise_scores, normalise_within_target
from leakaudit.metrics.summary import summarise

__all__ = ["DEFAULT_ALPHAS", "LEVELS", "POOLED", "REFERENCE_DESIGN_SEP", "PermutationNull", "SingleClassError",
           "_auc_statistic", "_cluster_draws", "_weighted_auroc", "attack_base", "auroc", "auroc_ci",
           "cluster_auroc_ci", "default_family", "distinct_arrangements", "format_ci", "fpr_label", "n_arrangements",
           "normalise_scores", "normalise_within_target", "paired_auroc_difference", "permutation_null", "prepare",
           "primary_leaky", "resolvable_key", "roc_metrics", "roc_points", "summarise", "threat_model", "tpr_at_fpr",
           "tpr_key", "with_threat_model"]
