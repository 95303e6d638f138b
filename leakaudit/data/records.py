"""One record = one privileged OPD example; JSONL round-trip with validation that names file, line and field."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from leakaudit.errors import InputError
from leakaudit.io import atomic_path

REQUIRED_TEXT_FIELDS = ("domain", "prompt", "privileged")


def make_record_id(domain: str, prompt: str, privileged: str) -> str:
    """Stable content hash: sha256 over domain, prompt and privileged (NUL-separated), first 16 hex chars."""
    h = hashlib.sha256("\x00".join((domain, prompt, privileged)).encode("utf-8"))
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Record:
    """A privileged on-policy-distillation example.

    prompt: what the student sees (and what a deployed student is queried with).
    privileged: what only the teacher sees (worked solution, patient record + rationale, canonical program).
    answer: short final answer when the source has one, else None.
    """

    domain: str
    prompt: str
    privileged: str
    answer: str | None = None
    source: str = "user"
    meta: dict[str, Any] = field(default_factory=dict)
    record_id: str = ""

    def __post_init__(self) -> None:
        if not self.record_id:
            object.__setattr__(self, "record_id", make_record_id(self.domain, self.prompt, self.privileged))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"record_id": d.pop("record_id"), **d}


def validate_record_dict(obj: Any, *, path: str | None = None, line: int | None = None) -> Record:
    """Turn one parsed JSON object into a Record, or raise InputError naming path/line/record/field."""
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=path, line=line)
    rid = obj.get("record_id") or None
    for name in REQUIRED_TEXT_FIELDS:
        if name not in obj:
            raise InputError("missing required field", path=path, line=line, record_id=rid, field=name)
        value = obj[name]
        if not isinstance(value, str):
            raise InputError(f"must be a string, got {type(value).__name__}", path=path, line=line,
                             record_id=rid, field=name)
        if not value.strip():
            raise InputError("is empty", path=path, line=line, record_id=rid, field=name)
    answer = obj.get("answer")
    if answer is not None and not isinstance(answer, str):
        answer = str(answer)
    meta = obj.get("meta") or {}
    if not isinstance(meta, dict):
        raise InputError("must be an object", path=path, line=line, record_id=rid, field="meta")
    unknown = set(obj) - {"record_id", "domain", "prompt", "privileged", "answer", "source", "meta"}
    if unknown:
        raise InputError(f"unknown fields {sorted(unknown)}", path=path, line=line, record_id=rid)
    rec = Record(domain=obj["domain"], prompt=obj["prompt"], privileged=obj["privileged"], answer=answer,
                 source=str(obj.get("source") or "user"), meta=meta, record_id=str(obj.get("record_id") or ""))
    return rec


def check_unique(records: Sequence[Record], *, path: str | None = None) -> None:
    """Raise InputError on the first duplicated record_id."""
    seen: dict[str, int] = {}
    for i, r in enumerate(records):
        if r.record_id in seen:
            raise InputError(f"duplicate record_id (first seen at record #{seen[r.record_id] + 1}, again at "
                             f"#{i + 1})", path=path, record_id=r.record_id, field="record_id")
        seen[r.record_id] = i


def check_token_budget(records: Sequence[Record], tokenizer: Any, max_tokens: int, *,
                       path: str | None = None) -> None:
    """Raise InputError for the first record whose prompt + privileged exceeds `max_tokens` tokens."""
    for r in records:
        for name in ("prompt", "privileged"):
            n = len(tokenizer(getattr(r, name), add_special_tokens=False)["input_ids"])
            if n > max_tokens:
                raise InputError(f"has {n} tokens, over the budget of {max_tokens}", path=path,
                                 record_id=r.record_id, field=name)


def decode_utf8(path: Path) -> str:
    """The file's text, or InputError naming the line holding the first byte that is not UTF-8."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise InputError(f"not valid UTF-8 ({e.reason} at byte {e.start})", path=str(path), line=line) from e


def jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line."""
    for number, line in enumerate(decode_utf8(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e.msg}", path=str(path), line=number) from e
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=number)
        yield number, obj


def record_lines(path: str | os.PathLike) -> list[int]:
    """The 1-based line number of each record `read_jsonl` (or, for .csv / .parquet, the `file` source) reads
    from `path`, in the same order, so a later check can name the line of a record."""
    path = Path(path)
    if path.suffix.lower() in (".csv", ".parquet"):
        from leakaudit.data.user_files import read_rows

        return [line for line, _ in read_rows(path)[1]]
    return [number for number, _ in jsonl_rows(path)]


def read_jsonl(path: str | os.PathLike) -> list[Record]:
    """Read and validate records; errors name the file, the 1-based line and the field."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    records = [validate_record_dict(obj, path=str(path), line=lineno) for lineno, obj in jsonl_rows(path)]
    if not records:
        raise InputError("contains no records", path=str(path))
    check_unique(records, path=str(path))
    return records


def write_jsonl(records: Iterable[Record], path: str | os.PathLike) -> None:
    """Write records atomically, one JSON object per line (UTF-8, not ASCII-escaped)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
