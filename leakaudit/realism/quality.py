"""The per-domain table of task-quality measures (``QUALITY``) and their mean over a level's records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from leakaudit.data.records import Record
from leakaudit.realism.code_quality import code_similarity, parses_as_python
from leakaudit.realism.math_quality import final_answer_match
from leakaudit.realism.medical_quality import label_match
from leakaudit.realism.rounding import rounded


@dataclass(frozen=True)
class QualityMeasure:
    """A task-quality measure of one domain. applies(record): whether the record has what it needs;
    context(records): whatever the measure needs from the run's records of the domain (computed once);
    score(sample, record, context): {metric: value in [0, 1]} for one decoded sample (higher = better)."""

    definition: dict[str, str]
    applies: Callable[[Record], bool]
    score: Callable[[str, Record, Any], dict[str, float]]
    context: Callable[[Sequence[Record]], Any] = lambda records: None


def _medical_labels(records: Sequence[Record]) -> dict[str, list[str]]:
    """source -> its distinct answers (the label set a sample is matched against)."""
    out: dict[str, list[str]] = {}
    for r in records:
        if r.answer:
            out.setdefault(r.source, [])
            if r.answer not in out[r.source]:
                out[r.source].append(r.answer)
    return out


QUALITY: dict[str, QualityMeasure] = {
    "math": QualityMeasure(
        definition={"final_answer_match": "extract_final_answer(sample) (last \\boxed{}, else after the last "
                                          "'answer is'/'answer:', else the last number; or the number it starts "
                                          "with) agrees with record.answer (any of its ', or equivalently' forms) "
                                          "after normalisation, or numerically within 1e-6"},
        applies=lambda r: bool(r.answer),
        score=lambda s, r, ctx: {"final_answer_match": float(final_answer_match(s, r.answer))}),
    "medical": QualityMeasure(
        definition={"label_match": "the label the sample names last, as a whole word or phrase, case-insensitive "
                                   "(one-letter labels in their own case), among the distinct answers of the "
                                   "record's source (a label inside a longer one never wins over it), is "
                                   "record.answer; surface matching: a negated mention counts as naming it"},
        applies=lambda r: bool(r.answer),
        score=lambda s, r, ctx: {"label_match": float(label_match(s, r.answer, ctx.get(r.source, [r.answer])))},
        context=_medical_labels),
    "code": QualityMeasure(
        definition={"similarity": "difflib.SequenceMatcher(None, sample, record.privileged, autojunk=False)"
                                  ".ratio() over the whole sample and the whole canonical body",
                    "parses": "the sample (its first ``` block if fenced), dedented, is accepted by ast.parse "
                              "(never executed)"},
        applies=lambda r: bool(r.privileged.strip()),
        score=lambda s, r, ctx: {"similarity": code_similarity(s, r.privileged),
                                 "parses": float(parses_as_python(s))}),
}
"""domain -> its task-quality measure; a domain not listed gets quality None with a reason."""


def quality_summary(records: Sequence[dict]) -> dict | None:
    """Over `records` (each {"quality": {metric: [value per sample]} | None}): {metric: mean over the records that
    have it of the mean of its samples' values, "n_records": records measured}; None when none is measured."""
    measured = [r["quality"] for r in records if r["quality"]]
    if not measured:
        return None
    metrics = list(dict.fromkeys(k for q in measured for k in q))
    out: dict = {m: rounded(float(np.mean([np.mean(q[m]) for q in measured if q.get(m)]))) for m in metrics}
    out["n_records"] = len(measured)
    return out
