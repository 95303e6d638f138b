"""Mean token lengths per record of each domain: measured on the records, or the token budgets' upper bounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Lengths:
    """Mean token lengths per record of one domain: the student prompt, the teacher's context (prompt + privileged in
    the template) and the reference text scored as a fixed text; `measured` = from the records, else budgets."""

    prompt: float
    teacher_context: float
    reference: float
    measured: bool


def budget_lengths(cfg: Any) -> dict[str, Lengths]:
    """Upper bounds from the token budgets, for every domain (no records needed)."""
    d = cfg.data
    return {dom: Lengths(d.max_prompt_tokens, d.max_prompt_tokens + d.max_privileged_tokens, d.max_privileged_tokens,
                         False) for dom in d.domains}


def measured_lengths(records: Sequence[Any], tokenizer: Any, teacher_template: str) -> dict[str, Lengths]:
    """Mean lengths per domain of `records`, with the token ids the stages use (leakaudit.prompting)."""
    from leakaudit.prompting import reference_text_ids, student_prompt_ids, teacher_prompt_ids

    sums: dict[str, list[float]] = {}
    for r in records:
        s = sums.setdefault(r.domain, [0.0, 0.0, 0.0, 0.0])
        s[0] += len(student_prompt_ids(tokenizer, r))
        s[1] += len(teacher_prompt_ids(tokenizer, r, teacher_template))
        s[2] += len(reference_text_ids(tokenizer, r))
        s[3] += 1
    return {d: Lengths(p / n, t / n, a / n, True) for d, (p, t, a, n) in sums.items()}
