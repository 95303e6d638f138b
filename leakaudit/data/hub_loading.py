"""Load Hugging Face datasets (from the hub, or from local files in the hub's format) and convert rows.

`data_files=` (alias `path=`) points at a local .jsonl/.json/.parquet/.csv file in the same format as the hub
dataset, which is how tests and air-gapped users run these sources without a network.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterable

from leakaudit.data.records import Record, validate_record_dict
from leakaudit.errors import InputError

LOCAL_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
RowConverter = Callable[[dict[str, Any]], Record]


def load_rows(hub_id: str, *, config: str | None, split: str, data_files: str | Path | None = None,
              cache_dir: str | Path | None = None) -> Iterable[dict[str, Any]]:
    """Rows of a hub dataset split, or of a local file when `data_files` is given (then hub_id/config unused)."""
    import datasets

    if data_files is not None:
        path = Path(data_files)
        if not path.is_file():
            raise InputError("no such file", path=str(path))
        builder = LOCAL_BUILDERS.get("".join(path.suffixes[-1:]).lower())
        if builder is None:
            raise InputError(f"unsupported file type; use one of {sorted(LOCAL_BUILDERS)}", path=str(path))
        try:
            return datasets.load_dataset(builder, data_files=str(path), split="train",
                                         cache_dir=None if cache_dir is None else str(cache_dir))
        except KeyError as e:  # datasets < 5 on a JSON row that lacks a column of the first rows
            if path.suffix.lower() != ".jsonl":
                raise InputError(f"a row lacks the field {e.args[0]!r} that earlier rows have", path=str(path),
                                 field=str(e.args[0])) from e
            from leakaudit.data.records import jsonl_rows

            return [row for _, row in jsonl_rows(path)]  # the converter then names the row and the field
    check_hub_dataset(hub_id)
    try:
        return datasets.load_dataset(hub_id, config, split=split,
                                     cache_dir=None if cache_dir is None else str(cache_dir))
    except (OSError, ValueError) as e:  # no network, unknown dataset id, unknown config or split, missing files
        raise InputError(f"could not load hub dataset {hub_id!r} (config {config!r}, split {split!r}): {e}; "
                         f"without a network pass data_files= a local copy", path=hub_id) from e


HUB_TIMEOUT_S = 5.0
"""Seconds the one hub request of `check_hub_dataset` may take (it is never retried)."""


def check_hub_dataset(hub_id: str) -> None:
    """Fail at once, naming `hub_id`, when the hub says the dataset does not exist or cannot be reached.

    One request of at most HUB_TIMEOUT_S seconds, no retries (`datasets.load_dataset` alone retries for tens of
    seconds without a network). In offline mode (HF_HUB_OFFLINE=1) nothing is asked: the datasets cache answers."""
    from huggingface_hub import HfApi

    from leakaudit.models import _hub_error_kinds, _hub_offline

    if _hub_offline():
        return
    kinds = _hub_error_kinds()
    endpoint = os.environ.get("HF_ENDPOINT") or None  # read now: huggingface_hub reads it once, at import
    try:
        HfApi(endpoint=endpoint).dataset_info(hub_id, timeout=HUB_TIMEOUT_S)
        return
    except kinds["gated"] as e:
        raise InputError("hub dataset is gated: accept its terms and log in (`hf auth login`), "
                         "or pass data_files= a local copy", path=hub_id) from e
    except kinds["missing"] as e:
        raise InputError("no such dataset on the hub (or it is private): check the id, or pass "
                         "data_files= a local copy", path=hub_id) from e
    except Exception as e:  # connection refused, DNS failure, timeout, offline mode, proxy errors
        reason = f"{type(e).__name__}: {e}"
    raise InputError(f"the Hugging Face hub could not be reached ({reason}): pass "
                     "data_files= a local copy, or set HF_HUB_OFFLINE=1 to use a copy in the datasets cache",
                     path=hub_id)


class FieldError(ValueError):
    """Raised by a row converter when one field's value is unusable."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def convert_rows(rows: Iterable[dict[str, Any]], converter: RowConverter, *, where: str) -> list[Record]:
    """Apply `converter` to every row; a missing or malformed field raises InputError naming row and field."""
    records = []
    for number, row in enumerate(rows, start=1):
        try:
            record = converter(row)
        except KeyError as e:
            raise InputError("is missing", path=where, line=number, field=str(e.args[0])) from e
        except FieldError as e:
            raise InputError(e.message, path=where, line=number, field=e.field) from e
        records.append(validate_record_dict(record.to_dict(), path=where, line=number))
    return records


def require_text(row: dict[str, Any], field: str) -> str:
    """row[field] as a stripped non-empty string, or FieldError."""
    value = row[field]
    if value is None:  # datasets fills a key absent from some rows with None
        raise FieldError(field, "is missing")
    if not isinstance(value, str):
        raise FieldError(field, f"must be text, got {type(value).__name__}")
    if not value.strip():
        raise FieldError(field, "is empty")
    return value.strip()


def load_hub_records(converter: RowConverter, *, hub_id: str, config: str | None, split: str,
                     data_files: str | Path | None, cache_dir: str | Path | None) -> list[Record]:
    """Load rows (hub or local file) and convert them, errors naming the file or hub id."""
    rows = load_rows(hub_id, config=config, split=split, data_files=data_files, cache_dir=cache_dir)
    return convert_rows(rows, converter, where=str(data_files) if data_files is not None else f"{hub_id}:{split}")
