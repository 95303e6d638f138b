"""Which records of a source a study admits: one domain per configured domain, every text within its token
budget. Used by run-study / audit (leakaudit.study) and by `leakaudit records`, so a file `records` accepts is one
the study accepts."""

from __future__ import annotations

from typing import Any, Sequence

from leakaudit.data.records import Record
from leakaudit.errors import InputError

BUDGET_KEYS = {"prompt": "max_prompt_tokens", "privileged": "max_privileged_tokens"}
"""Text field -> the data.* setting that bounds its tokens."""


def check_domain(records: Sequence[Record], domain: str, *, where: str, lines: list[int] | None,
                 configured: str) -> None:
    """InputError naming the first record whose domain is not `domain` (records are never relabelled: that would
    change their ids). `configured` says where `domain` comes from, e.g. 'data.domains.math'."""
    for i, r in enumerate(records):
        if r.domain != domain:
            raise InputError(f"has domain '{r.domain}', but {configured} takes records of domain '{domain}' "
                             "(records are never relabelled: that would change their ids); rename the configured "
                             "domain or fix the record", path=where, line=lines[i] if lines else None,
                             record_id=r.record_id, field="domain")


def over_budget(record: Record, tokenizer: Any, data: Any) -> tuple[str, int, int] | None:
    """(field, tokens, budget) of the record's first text over its token budget (data: a DataConfig), else None."""
    for name, key in BUDGET_KEYS.items():
        limit = getattr(data, key)
        n = len(tokenizer(getattr(record, name), add_special_tokens=False)["input_ids"])
        if n > limit:
            return name, n, limit
    return None


def check_budget(records: Sequence[Record], tokenizer: Any, data: Any, *, where: str,
                 lines: list[int] | None) -> None:
    """InputError naming the first record over a token budget, its field and the setting."""
    for i, r in enumerate(records):
        over = over_budget(r, tokenizer, data)
        if over is not None:
            name, n, limit = over
            raise InputError(f"has {n} tokens, over the budget of {limit} (data.{BUDGET_KEYS[name]})", path=where,
                             line=lines[i] if lines else None, record_id=r.record_id, field=name)


def admit(records: list[Record], *, source: str, domain: str, configured: str, tokenizer: Any, data: Any,
          where: str, lines: list[int] | None) -> tuple[list[Record], int]:
    """(the records a study takes from one source, how many were dropped): every record of `domain`; a user's
    file (or any source with data.drop_over_budget false) has no record over budget, a built-in source's records
    over budget are dropped."""
    check_domain(records, domain, where=where, lines=lines, configured=configured)
    if source == "file" or not data.drop_over_budget:
        check_budget(records, tokenizer, data, where=where, lines=lines)  # a user's file is never silently trimmed
        return records, 0
    kept = [r for r in records if over_budget(r, tokenizer, data) is None]
    return kept, len(records) - len(kept)
