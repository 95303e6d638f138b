"""One record = one privileged OPD example; JSONL round-trip with validation that names file, line and field."""

from __future__ import annotations

import hashlib
import json
import math
import os
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from leakaudit.errors import InputError
from leakaudit.io import atomic_path
from leakaudit.rundir import MAX_NAME_BYTES, SAFE_NAME

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


MAX_META_DEPTH = 32
"""How deeply `meta` may nest (objects and lists); deeper input is refused before anything recurses over it."""
OPTIONAL_TEXT_FIELDS = ("answer", "source")


class JsonShapeError(ValueError):
    """A JSON text that parses but is outside the record schema (NaN, Infinity, a key given twice)."""


def _refuse_constant(name: str) -> Any:
    raise JsonShapeError(f"{name} is not a JSON number (records hold finite numbers only)")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonShapeError(f"the key {key!r} is given twice in one object")
        out[key] = value
    return out


def loads_strict(text: str) -> Any:
    """json.loads that refuses NaN / Infinity, a key given twice and nesting past what the parser can hold
    (JsonShapeError; json.JSONDecodeError for text that is not JSON). The standard parser with hooks: it
    already locates syntax errors; only these three shapes need refusing."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicate_keys)
    except RecursionError:
        raise JsonShapeError(f"nested too deeply (at most {MAX_META_DEPTH} levels)") from None


def has_visible_character(text: str) -> bool:
    """Whether `text` holds a character that shows: not white space, a control, a format (zero-width) or an
    unassigned / private-use / surrogate code point."""
    return any(not c.isspace() and unicodedata.category(c)[0] not in "CZ" for c in text)


def text_problem(value: str) -> str | None:
    """Why a text field cannot be stored (a lone surrogate, a NUL), else None."""
    if "\x00" in value:
        return "holds a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"is not valid Unicode (a lone surrogate {value[e.start]!r} at character {e.start})"
    return None


def id_problem(value: str) -> str | None:
    """Why a record id is refused (text_problem, a control or format character), else None."""
    problem = text_problem(value)
    if problem is None and any(unicodedata.category(c) in ("Cc", "Cf") for c in value):
        return "holds a control or invisible format character"
    return problem


def normalise_id(record_id: str) -> str:
    """The form record ids are compared in: Unicode NFKC, surrounding white space removed (two ids that print
    alike are one id)."""
    return unicodedata.normalize("NFKC", record_id).strip()


def meta_problem(meta: Any) -> str | None:
    """Why `meta` cannot be stored as JSON (nested past MAX_META_DEPTH, a non-finite number, a text that is not
    valid Unicode, a value JSON has no type for), else None. Iterative: the depth is bounded before anything
    recurses over it."""
    stack: list[tuple[Any, int, str]] = [(meta, 1, "meta")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, dict):
            if depth > MAX_META_DEPTH:
                return f"{where}: nested more than {MAX_META_DEPTH} levels deep"
            for k, v in value.items():
                if not isinstance(k, str) or text_problem(k):
                    return f"{where}: key {k!r} is not a valid text"
                stack.append((v, depth + 1, f"{where}.{k}"))
        elif isinstance(value, (list, tuple)):
            if depth > MAX_META_DEPTH:
                return f"{where}: nested more than {MAX_META_DEPTH} levels deep"
            stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, str):
            problem = text_problem(value)
            if problem:
                return f"{where} {problem}"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{where}: {value} is not a finite number"
        elif value is not None and not isinstance(value, (bool, int, float)):
            return f"{where}: a {type(value).__name__} is not a JSON value"
    return None


def validate_record_dict(obj: Any, *, path: str | None = None, line: int | None = None) -> Record:
    """Turn one parsed JSON object into a Record, or raise InputError naming path/line/record/field.
    The one record schema: a string id (when given) without control characters, text fields that are valid
    Unicode without NUL, required ones holding a visible character, a domain that can name files, and a
    JSON-storable meta."""
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=path, line=line)
    rid = obj.get("record_id")
    if rid is not None and not isinstance(rid, str):
        raise InputError(f"must be a string, got {type(rid).__name__} {rid!r:.40}", path=path, line=line,
                         field="record_id")
    if rid and id_problem(rid):
        raise InputError(id_problem(rid), path=path, line=line, record_id=ascii(rid), field="record_id")
    rid = rid or None
    for name in REQUIRED_TEXT_FIELDS:
        if name not in obj:
            raise InputError("missing required field", path=path, line=line, record_id=rid, field=name)
        value = obj[name]
        if not isinstance(value, str):
            raise InputError(f"must be a string, got {type(value).__name__}", path=path, line=line,
                             record_id=rid, field=name)
        if not value.strip():
            raise InputError("is empty", path=path, line=line, record_id=rid, field=name)
        problem = text_problem(value) or (None if has_visible_character(value) else "has no visible character")
        if problem:
            raise InputError(problem, path=path, line=line, record_id=rid, field=name)
    if not SAFE_NAME.match(obj["domain"]) or len(obj["domain"].encode("utf-8")) > MAX_NAME_BYTES:
        raise InputError(f"{obj['domain']!r} cannot name the domain's models and files (letters, digits, '.', '_' "
                         "and '-', starting with a letter or digit)", path=path, line=line, record_id=rid,
                         field="domain")
    answer = obj.get("answer")
    if isinstance(answer, bool) or (answer is not None and not isinstance(answer, (str, int, float))):
        raise InputError(f"must be a string, got {type(answer).__name__}", path=path, line=line, record_id=rid,
                         field="answer")
    if isinstance(answer, float) and not math.isfinite(answer):
        raise InputError(f"{answer} is not a finite number", path=path, line=line, record_id=rid, field="answer")
    if answer is not None and not isinstance(answer, str):
        answer = str(answer)  # a number from a CSV / parquet column
    source = obj.get("source")
    if source is not None and not isinstance(source, str):
        raise InputError(f"must be a string, got {type(source).__name__}", path=path, line=line, record_id=rid,
                         field="source")
    for name, value in (("answer", answer), ("source", source)):
        if value and text_problem(value):
            raise InputError(text_problem(value), path=path, line=line, record_id=rid, field=name)
    meta = obj.get("meta") or {}
    if not isinstance(meta, dict):
        raise InputError("must be an object", path=path, line=line, record_id=rid, field="meta")
    problem = meta_problem(meta)
    if problem:
        raise InputError(problem, path=path, line=line, record_id=rid, field="meta")
    unknown = set(obj) - {"record_id", "domain", "prompt", "privileged", "answer", "source", "meta"}
    if unknown:
        raise InputError(f"unknown fields {sorted(unknown)}", path=path, line=line, record_id=rid)
    rec = Record(domain=obj["domain"], prompt=obj["prompt"], privileged=obj["privileged"], answer=answer,
                 source=source or "user", meta=meta, record_id=rid or "")
    return rec


def check_unique(records: Sequence[Record], *, path: str | None = None) -> None:
    """Raise InputError on the first duplicated record_id (compared after normalise_id)."""
    seen: dict[str, int] = {}
    for i, r in enumerate(records):
        key = normalise_id(r.record_id)
        if key in seen:
            raise InputError(f"duplicate record_id (first seen at record #{seen[key] + 1}, again at "
                             f"#{i + 1})", path=path, record_id=r.record_id, field="record_id")
        seen[key] = i


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
            obj = loads_strict(line)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e.msg}", path=str(path), line=number) from e
        except JsonShapeError as e:
            raise InputError(f"invalid record: {e}", path=str(path), line=number) from None
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=number)
        yield number, obj


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
