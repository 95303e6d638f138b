"""`blind_text`: a text-only classifier that never looks at a model: checks the split, not the target.

Das, Zhang, Tramèr 2024, "Blind Baselines Beat Membership Inference Attacks for Foundation Models",
https://arxiv.org/abs/2406.16201: when members and non-members differ in distribution, a bag-of-words
classifier already "detects" membership. leakaudit draws both from one pool at random, so this attack should
sit at AUROC ~ 0.5; a clearly higher value means the split (or the data) leaks through the text alone.

Shapes: texts [N] str, labels [N] 0/1. A pipeline (CountVectorizer or TfidfVectorizer -> LogisticRegression,
sklearn) is fitted on k-1 folds of a StratifiedKFold and predicts the held-out fold; every record's score is
its out-of-fold P(member), so no record is scored by a model that saw its label. The vectoriser is refitted
inside each fold. Sign: P(member), member-high. Never NaN. Each class needs at least n_splits records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline

from attacks.base import AttackInputs, check_choice, check_range
from attacks.registry import register
from attacks.errors import AttackInputError


@dataclass(frozen=True)
class BlindTextParams:
    """Parameters of `blind_text`."""

    n_splits: int = 5
    """Cross-validation folds, >= 2 (stratified, shuffled with `seed`)."""
    vectorizer: str = "tfidf"
    """'tfidf' (sklearn TfidfVectorizer) or 'count' (CountVectorizer)."""
    ngram_max: int = 2
    """Word n-grams from 1 to ngram_max, in [1, 3]."""
    C: float = 1.0
    """Inverse L2 regularisation strength of the logistic regression, > 0."""
    seed: int = 0
    """Seed of the fold shuffle, >= 0 (recorded with the params)."""

    def __post_init__(self) -> None:
        check_range("blind_text.n_splits", self.n_splits, 2, None, integer=True)
        check_choice("blind_text.vectorizer", self.vectorizer, ("tfidf", "count"))
        check_range("blind_text.ngram_max", self.ngram_max, 1, 3, integer=True)
        check_range("blind_text.C", self.C, 0.0, None, lo_open=True)
        check_range("blind_text.seed", self.seed, 0, None, integer=True)


@register("blind_text", BlindTextParams, needs=("texts", "labels"), family="blind", threat_model="check",
          description="out-of-fold P(member) of a bag-of-words logistic regression on the text alone")
def blind_text(inputs: AttackInputs, params: BlindTextParams) -> np.ndarray:
    labels = np.asarray(inputs.labels).astype(np.int64)
    counts = np.bincount(labels, minlength=2)
    # Small studies have fewer records per class than folds: use as many folds as the rarer class allows.
    n_splits = min(params.n_splits, int(counts.min()))
    if n_splits < 2:
        raise AttackInputError(f"blind_text needs at least 2 members and 2 non-members to cross-validate; got "
                         f"{counts[1]} members, {counts[0]} non-members", field="labels")
    vec_cls = TfidfVectorizer if params.vectorizer == "tfidf" else CountVectorizer
    model = make_pipeline(vec_cls(ngram_range=(1, params.ngram_max)), LogisticRegression(C=params.C, max_iter=1000))
    folds = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=params.seed)
    proba = cross_val_predict(model, list(inputs.texts), labels, cv=folds, method="predict_proba")
    return np.ascontiguousarray(proba[:, 1], dtype=np.float64)
