"""An audit's records as given: candidates, population, background and null sample, each file read and checked.

One domain for every file; no record in two roles where that would let a reference train on a candidate or a
null-sample record (compared by id and by text: `same_record_keys`); a candidate's label, when given, a JSON
boolean; every record within the token budget. Writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakaudit.data.admit import check_budget
from leakaudit.data.records import Record, check_unique, make_record_id, normalise_id
from leakaudit.errors import InputError


@dataclass(frozen=True)
class AuditRecords:
    candidates: list[Record]
    population: list[Record] = field(default_factory=list)
    background: list[Record] = field(default_factory=list)
    """--background: every trained reference also trains on these."""
    null_sample: list[Record] = field(default_factory=list)
    """--null-sample: known non-members no reference trains on (empty: split off the population)."""

    def all(self) -> list[Record]:
        """records.jsonl's order: candidates, population, background, null sample."""
        return self.candidates + self.population + self.background + self.null_sample


def same_record_keys(record: Record) -> tuple[str, str]:
    """What makes two audit records one to a reference that trains on them: the same id, or the same text given
    under another id (its content hash, make_record_id; before, only ids were compared). ('id:…', 'text:…')."""
    return (f"id:{normalise_id(record.record_id)}",
            f"text:{make_record_id(record.domain, record.prompt, record.privileged)}")


def check_audit_label(record: Record, *, path: str, line: int | None) -> None:
    """A candidate's meta.is_member, when given, is a JSON boolean (or 0 / 1): the string "false" is truthy, and
    bool("false") made every such candidate a member."""
    value = record.meta.get("is_member")
    if value is None or isinstance(value, bool) or (type(value) is int and value in (0, 1)):
        return
    raise InputError(f"meta.is_member must be true or false (a JSON boolean), got {value!r}", path=path, line=line,
                     record_id=record.record_id, field="meta.is_member")


def _keys(records: list[Record]) -> dict[str, str]:
    """{identity (same_record_keys): record id} of `records`."""
    return {key: r.record_id for r in records for key in same_record_keys(r)}


def _check_roles(role: str, r: Record, seen: dict[str, dict[str, str]], *, path: str, line: int | None) -> None:
    """InputError when `r`, read as `role`, is a record of a role it must exclude (`seen`: role -> identities)."""
    by_id, by_text = same_record_keys(r)
    candidates = seen["candidates"]
    if role in ("population", "background") and (by_id in candidates or by_text in candidates):
        same = "" if by_id in candidates else f" (the text of candidate {candidates[by_text]})"
        raise InputError(f"is also a candidate{same}; the {role} (what references train on) must exclude every "
                         "candidate", path=path, line=line, record_id=r.record_id)
    if role == "null sample":
        for other, keys in (("candidate", candidates), ("population record", seen["population"]),
                            ("background record", seen["background"])):
            if by_id in keys or by_text in keys:
                raise InputError(f"is also a {other}; the null sample must be known non-members that no reference "
                                 "trains on", path=path, line=line, record_id=r.record_id)
    if role == "background" and (by_id in seen["population"] or by_text in seen["population"]):
        raise InputError("is also a population record; the background (trained on by every reference) must exclude "
                         "the population (RMIA's held-out records must stay OUT)", path=path, line=line,
                         record_id=r.record_id)


def read_audit_records(audit: Any, tokenizer: Any, data: Any) -> AuditRecords:
    """The files of `audit` (the run config's audit section) in the order candidates, population, background, null
    sample; `data` (DataConfig) holds the token budget. InputError naming the file, line, record and field."""
    from leakaudit.data.audit_inputs import ColumnMap, read_records

    files = [("candidates", Path(audit.candidates))]
    for role, given in (("population", audit.population), ("background", audit.background),
                        ("null sample", audit.null_sample)):
        if given:
            files.append((role, Path(given)))
    columns = ColumnMap(prompt=audit.prompt_column, privileged=audit.privileged_column, record_id=audit.id_column,
                        domain=audit.domain)
    loaded: dict[str, list[Record]] = {}
    seen: dict[str, dict[str, str]] = {"candidates": {}, "population": {}, "background": {}}
    domain = None
    for role, path in files:
        recs, lines = read_records(path, columns)
        for r, line in zip(recs, lines):
            domain = domain or r.domain
            if r.domain != domain:
                raise InputError(f"has domain '{r.domain}', but the audit's records are of domain '{domain}' "
                                 "(one audit scores one domain)", path=str(path), line=line,
                                 record_id=r.record_id, field="domain")
            if role == "candidates":
                check_audit_label(r, path=str(path), line=line)
            _check_roles(role, r, seen, path=str(path), line=line)
        if role in ("background", "null sample"):
            check_unique(recs, path=str(path))
        check_budget(recs, tokenizer, data, where=str(path), lines=lines)
        loaded[role] = recs
        seen = {"candidates": _keys(loaded["candidates"]), "population": _keys(loaded.get("population", [])),
                "background": _keys(loaded.get("background", []))}
    if not audit.references and not loaded.get("population"):
        raise InputError("--population is required to train references (or give --references)", field="population")
    if not loaded.get("population") and not loaded.get("null sample"):
        raise InputError("--population or --null-sample is required: the verdict compares the candidates with "
                         "known non-members that no reference trained on", field="population")
    return AuditRecords(loaded["candidates"], loaded.get("population", []), loaded.get("background", []),
                        loaded.get("null sample", []))
