"""Medical task quality: whether the label a decoded sample names last is the record's answer."""

from __future__ import annotations

import re
from typing import Sequence


def _label_pattern(label: str) -> re.Pattern:
    """`label` as a whole word / phrase (no word character on either side); case-insensitive, except a one-letter
    label (a multiple-choice letter), matched in its own case so the article 'a' is not option A."""
    return re.compile(r"(?<!\w)" + re.escape(label) + r"(?!\w)", 0 if len(label) == 1 else re.IGNORECASE)


def named_label(text: str, labels: Sequence[str]) -> str | None:
    """The label the text names last: the occurrence that ends last, the longer on a tie, so a label inside a
    longer one never wins over it ('diabetes' inside 'no diabetes', 'hypothyroidism' inside 'primary
    hypothyroidism'). None when no label occurs."""
    spans = [(m.end(), m.end() - m.start(), lab) for lab in dict.fromkeys(labels)
             for m in _label_pattern(lab).finditer(text)]
    return max(spans)[2] if spans else None


def label_match(sample: str, answer: str, labels: Sequence[str]) -> bool:
    """True when the label the sample names last (named_label over `labels`, which should hold `answer`) is
    `answer`, compared case-insensitively."""
    said = named_label(sample, list(labels) if answer in labels else [*labels, answer])
    return said is not None and said.lower() == answer.lower()
