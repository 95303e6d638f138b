"""Math task quality: whether a decoded sample's final answer agrees with the record's answer."""

from __future__ import annotations

import re

from leakaudit.data.hub_math import last_boxed

_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:|=)\s*:?\s*([^\n]+)", re.IGNORECASE)
_LEADING_NUMBER = re.compile(rf"(?:{_NUMBER.pattern})(?=\s+[^\W\d_]|%|$)")
"""A number that starts an answer and is followed by a word, '%' or nothing ('1,000 apples'; not '2^(n-1)')."""
_ALTERNATIVES = re.compile(r",\s*or\s+(?:equivalently|approximately|an equivalent form such as)?\s*", re.IGNORECASE)


def extract_final_answer(text: str) -> str | None:
    r"""The sample's final answer: the last \boxed{...}; else what follows the last "answer is" / "answer:" /
    "answer =" on its line (cut at the first ". " sentence end); else the last number (integers, decimals,
    thousands commas, a/b, a leading minus). None when there is none."""
    text = text.replace("\u2212", "-")
    boxed = last_boxed(text)
    if boxed:
        return boxed
    said = list(_ANSWER_IS.finditer(text))
    if said:
        rest = re.split(r"\.\s", said[-1].group(1), maxsplit=1)[0].strip().rstrip(".").strip()
        if rest:
            return rest
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalise_answer(s: str) -> str:
    r"""Lower case without spaces, $, **, \left / \right, a trailing '.', a leading 'x =' (one letter), and
    thousands commas in a plain number; \dfrac / \tfrac -> \frac."""
    s = s.replace("\u2212", "-").lower().strip()
    for junk in ("$", "**", "\\left", "\\right", "\\!", "\\,", " "):
        s = s.replace(junk, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").rstrip(".")
    s = re.sub(r"^[a-z]=(?=.)", "", s)
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    return s


def as_number(s: str) -> float | None:
    r"""The value of a normalised answer that is a plain number, a/b or \frac{a}{b}; None otherwise."""
    s = normalise_answer(s)
    m = re.fullmatch(r"\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s) or re.fullmatch(
        r"(-?\d+(?:\.\d+)?)/(-?\d+(?:\.\d+)?)", s)
    try:
        if m:
            den = float(m.group(2))
            return float(m.group(1)) / den if den else None
        return float(s)
    except ValueError:
        return None


def answer_forms(answer: str) -> list[str]:
    """The accepted forms of an answer: CHAMP writes alternatives as 'X, or equivalently Y' / ', or approximately
    Y' / ', or an equivalent form such as Y' (leakaudit.data.champ); split there."""
    return [p.strip() for p in _ALTERNATIVES.split(answer) if p.strip()]


def answers_agree(a: str, b: str) -> bool:
    """Equal after normalise_answer, or both numbers within 1e-6 (relative) of each other."""
    if normalise_answer(a) == normalise_answer(b):
        return True
    x, y = as_number(a), as_number(b)
    return x is not None and y is not None and abs(x - y) <= 1e-6 * max(1.0, abs(x), abs(y))


def final_answer_match(sample: str, answer: str) -> bool:
    """True when the sample's extracted final answer (extract_final_answer) agrees with any form of `answer`; a
    number the extracted text starts with, followed by a word or nothing, counts as one of its forms ('1,000
    apples' -> '1,000')"""
    said = extract_final_answer(sample)
    if said is None:
        return False
    forms = answer_forms(said)
    lead = _LEADING_NUMBER.match(said.replace("\u2212", "-").lstrip("$ "))
    if lead:
        forms.append(lead.group(0))
    return any(answers_agree(s, a) for s in forms for a in answer_forms(answer))
