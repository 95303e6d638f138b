"""The user's own records: JSONL, CSV or parquet, with a mapping from record fields to the file's columns.

`columns={"prompt": "question", "privileged": "solution", "answer": "final"}` reads the record's prompt from
the column `question`, and so on; a field not in the mapping is read from the column of the same name when
it exists. `domain=` fills the domain when the file has no domain column. Every row is validated with
`validate_record_dict`, so errors name the file, the line (1-based, the header is line 1 in a CSV; the row
number in a parquet file) and the field.
"""

from __future__ import annotations

import io
import json
import re
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import pandas as pd

from leakaudit.data.records import (JsonShapeError, Record, decode_utf8, jsonl_rows, loads_strict,
                                    validate_record_dict)
from leakaudit.data.registry import register_source
from leakaudit.errors import ConfigError, InputError
from leakaudit.io import read_parquet

RECORD_FIELDS = ("record_id", "domain", "prompt", "privileged", "answer", "source", "meta")
REQUIRED = ("prompt", "privileged")


def table_rows(frame: pd.DataFrame, first_line: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row dict) for each row; missing cells become None."""
    frame = frame.astype(object).where(frame.notna(), None)
    for offset, row in enumerate(frame.to_dict(orient="records")):
        yield first_line + offset, row


def read_csv_frame(path: Path) -> pd.DataFrame:
    """The CSV as strings; pandas' parse errors (empty file, a row with more fields than the header, an unclosed
    quote) become InputError naming the file and, when pandas reports one, the line."""
    try:
        return pd.read_csv(io.StringIO(decode_utf8(path)), dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError as e:
        raise InputError("is empty: a CSV needs a header line naming its columns", path=str(path)) from e
    except pd.errors.ParserError as e:
        message = " ".join(str(e).split())
        found = re.search(r"\bline (\d+)", message)
        raise InputError(f"is not a valid CSV ({message})", path=str(path),
                         line=int(found.group(1)) if found else None) from e


def read_rows(path: Path) -> tuple[list[str] | None, Iterator[tuple[int, dict[str, Any]]]]:
    """The file's column names (None for JSONL, whose keys vary by line) and its numbered rows."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return None, jsonl_rows(path)
    if suffix == ".csv":
        frame = read_csv_frame(path)
        return list(frame.columns), table_rows(frame, first_line=2)
    if suffix == ".parquet":
        frame = read_parquet(path)  # unreadable: InputError naming it
        return list(frame.columns), table_rows(frame, first_line=1)
    raise InputError("unsupported file type; use .jsonl, .csv or .parquet", path=str(path))


def resolve_columns(columns: Mapping[str, str] | None) -> dict[str, str]:
    """record field -> file column, defaulting each field to its own name."""
    columns = dict(columns or {})
    unknown = set(columns) - set(RECORD_FIELDS)
    if unknown:
        raise ConfigError(f"columns= maps unknown record fields {sorted(unknown)}; fields: {', '.join(RECORD_FIELDS)}")
    return {name: columns.get(name, name) for name in RECORD_FIELDS}


def row_to_record_dict(row: dict[str, Any], mapping: dict[str, str], *, domain: str, path: Path,
                       line: int) -> dict[str, Any]:
    """Pick the mapped columns out of one row; empty optional cells are dropped."""
    out: dict[str, Any] = {}
    for name, column in mapping.items():
        value = row.get(column)
        if name in REQUIRED and (value is None or (isinstance(value, str) and not value.strip())):
            what = "missing" if column not in row else "is empty"
            if column != name:
                what += f" (the column mapped to record field '{name}')"
            raise InputError(what, path=str(path), line=line, field=column)
        if value is None or value == "":
            continue
        if name == "meta" and isinstance(value, str):
            try:
                value = loads_strict(value)
            except json.JSONDecodeError as e:
                raise InputError(f"is not a JSON object: {e.msg}", path=str(path), line=line, field=column) from e
            except JsonShapeError as e:
                raise InputError(f"is not a record's meta: {e}", path=str(path), line=line, field=column) from None
        out[name] = value
    out.setdefault("domain", domain)
    out.setdefault("source", f"file:{path.name}")
    return out


@register_source("file", "your own records: JSONL, CSV or parquet (path=, columns={field: column}, domain=)")
def load_user_file(*, seed: int = 0, path: str | Path | None = None, columns: Mapping[str, str] | None = None,
                   domain: str = "general") -> list[Record]:
    """Every row of the file, in file order, validated into Records."""
    if path is None:
        raise ConfigError("the 'file' source needs path=")
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    header, rows = read_rows(path)
    return records_from_rows(header, rows, resolve_columns(columns), domain=domain, path=path)[0]


def records_from_rows(header: list[str] | None, rows: Iterator[tuple[int, dict[str, Any]]], mapping: dict[str, str],
                      *, domain: str, path: Path | str) -> tuple[list[Record], list[int]]:
    """(validated Records, the line of each) from numbered rows; `header` (None for JSONL) is checked for the
    required columns first. InputError naming path, line and field; an empty input is an error too."""
    path = Path(path)
    if header is not None:
        for name in REQUIRED:
            if mapping[name] not in header:
                raise InputError(f"column '{mapping[name]}' not found (columns: {', '.join(header)})",
                                 path=str(path), field=name)
    records, lines = [], []
    for line, row in rows:
        records.append(validate_record_dict(row_to_record_dict(row, mapping, domain=domain, path=path, line=line),
                                            path=str(path), line=line))
        lines.append(line)
    if not records:
        raise InputError("contains no records", path=str(path))
    return records, lines


def record_lines(path: str | os.PathLike) -> list[int]:
    """The 1-based line number of each record `read_jsonl` (or, for .csv / .parquet, the `file` source) reads
    from `path`, in the same order, so a later check can name the line of a record."""
    path = Path(path)
    if path.suffix.lower() in (".csv", ".parquet"):
        return [line for line, _ in read_rows(path)[1]]
    return [number for number, _ in jsonl_rows(path)]
