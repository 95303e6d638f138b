"""Restating a record by its domain's rule, and counting which rule restated what."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from leakaudit.data.code_plan import describe_code
from leakaudit.data.records import Record
from leakaudit.data.restate.code_rule import restate_code
from leakaudit.data.restate.math_rule import restate_math
from leakaudit.data.restate.medical_rule import restate_medical
from leakaudit.data.restate.result import Restatement


def restatement(record: Record) -> Restatement:
    """The record's privileged text restated by its domain's rule, or the verbatim fallback (never raises on
    record content)."""
    if record.domain == "code":
        return restate_code(record)
    if record.domain == "math":
        return restate_math(record)
    if record.domain == "medical":
        return restate_medical(record)
    return Restatement(record.privileged, "verbatim.no_rule_for_domain")


def plan_statement(record: Record) -> Restatement:
    """The plan teacher's target: a code record's canonical body told as a numbered English plan
    (leakaudit.data.code_plan, rule ``code.plan``, or its ``verbatim.code_*`` fallback); a record of any other
    domain gets its domain's restatement (math and medical already answer in another form than the reference)."""
    if record.domain == "code":
        text, rule = describe_code(record)
        return Restatement(text, rule)
    return restatement(record)


def restate(record: Record) -> str:
    """The restated answer (the privileged text unchanged when no rule applies: see `restatement`)."""
    return restatement(record).text


def rule_counts(records: Iterable[Record]) -> dict[str, int]:
    """How many records each rule (or fallback) restated, sorted by rule name."""
    return dict(sorted(Counter(restatement(r).rule for r in records).items()))
