"""An audit's record files as an auditor has them: JSONL, CSV, parquet, or a Hugging Face dataset, with a column
mapping (`--prompt-column`, `--privileged-column`, `--id-column`) and a domain for rows without one (`--domain`).

A source is one string:
- a file path ending in .jsonl / .json / .csv / .parquet (leakaudit.data.user_files; lines are 1-based, a CSV's
  header is line 1, a parquet file's rows are numbered from 1);
- `hf:NAME[:CONFIG][@SPLIT]` (split default "train"): NAME a hub dataset id, a local folder in the hub's layout
  (data files that `datasets.load_dataset(folder)` reads) or a folder written by `Dataset.save_to_disk` /
  `DatasetDict.save_to_disk`; rows are numbered from 1 and errors name them as lines;
- a directory path (no prefix): the same as `hf:<directory>`.
Every row goes through the same validation as a JSONL record (leakaudit.data.records.validate_record_dict), so bad
input names the source, the line and the field (InputError: exit 2, nothing written).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from leakaudit.data.records import Record, check_unique, read_jsonl
from leakaudit.data.user_files import record_lines
from leakaudit.data.user_files import records_from_rows, resolve_columns, table_rows
from leakaudit.errors import InputError

HF_PREFIX = "hf:"
DEFAULT_SPLIT = "train"
DEFAULT_DOMAIN = "general"
"""The domain of rows that have no domain column when --domain is not given (as the `file` source)."""
SAVED_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")
"""Files `save_to_disk` writes: a folder holding one of them is read with `datasets.load_from_disk`."""


@dataclass(frozen=True)
class ColumnMap:
    """Which column holds each record field (None = the field's own name) and the domain of rows without one."""

    prompt: str | None = None
    privileged: str | None = None
    record_id: str | None = None
    domain: str | None = None
    """Not a column: the domain given to rows that have no `domain` column (--domain)."""

    @property
    def is_default(self) -> bool:
        return self.prompt is None and self.privileged is None and self.record_id is None and self.domain is None

    def mapping(self) -> dict[str, str]:
        """record field -> column (leakaudit.data.user_files.resolve_columns)."""
        given = {"prompt": self.prompt, "privileged": self.privileged, "record_id": self.record_id}
        return resolve_columns({k: v for k, v in given.items() if v})


def parse_hf(spec: str) -> tuple[str, str | None, str]:
    """'hf:NAME[:CONFIG][@SPLIT]' (or a bare directory) -> (name, config or None, split)."""
    body = spec[len(HF_PREFIX):] if spec.startswith(HF_PREFIX) else spec
    body, _, split = body.partition("@")
    name, _, config = body.partition(":")
    if not name.strip():
        raise InputError(f"a Hugging Face dataset is written {HF_PREFIX}NAME[:CONFIG][@SPLIT]; no NAME", path=spec)
    return name, config or None, split or DEFAULT_SPLIT


def _dataset(spec: str):
    """The datasets.Dataset a hf: source or a directory names."""
    import datasets

    name, config, split = parse_hf(spec)
    folder = Path(name)
    if folder.is_dir() and any((folder / m).is_file() for m in SAVED_MARKERS):
        try:
            ds = datasets.load_from_disk(str(folder))
        except (OSError, ValueError, FileNotFoundError) as e:
            raise InputError(f"is not a readable saved dataset ({e})", path=spec) from e
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise InputError(f"has no split '{split}' (splits: {', '.join(ds)}); write {HF_PREFIX}{name}@SPLIT",
                                 path=spec)
            ds = ds[split]
        return ds
    if folder.is_dir():
        try:
            return datasets.load_dataset(str(folder), config, split=split)
        except (OSError, ValueError) as e:
            raise InputError(f"could not read the dataset folder (config {config!r}, split {split!r}): {e}",
                             path=spec) from e
    if not spec.startswith(HF_PREFIX):
        raise InputError(f"no such file or directory (a Hugging Face dataset is written {HF_PREFIX}NAME[:CONFIG]"
                         "[@SPLIT])", path=spec)
    from leakaudit.data.hub_loading import load_rows

    return load_rows(name, config=config, split=split)


def _dataset_rows(spec: str) -> tuple[list[str], Iterator[tuple[int, dict[str, Any]]]]:
    ds = _dataset(spec)
    frame = ds.to_pandas()
    return list(frame.columns), table_rows(frame, first_line=1)


def read_records(spec: str | Path, columns: ColumnMap | None = None) -> tuple[list[Record], list[int]]:
    """(records, the line or row number of each) of one audit source (the module docstring lists the forms).
    A JSONL file read without a mapping is read as leakaudit records (leakaudit.data.records.read_jsonl)."""
    columns = columns or ColumnMap()
    spec = str(spec)
    path = Path(spec)
    suffix = path.suffix.lower()
    if path.is_file() and suffix in (".jsonl", ".json") and columns.is_default:
        return read_jsonl(path), record_lines(path)
    domain = columns.domain or DEFAULT_DOMAIN
    if path.is_file():
        from leakaudit.data.user_files import read_rows

        header, rows = read_rows(path)
    elif path.is_dir() or spec.startswith(HF_PREFIX):
        header, rows = _dataset_rows(spec)
    else:
        raise InputError(f"no such file or directory (files: .jsonl, .csv, .parquet; a Hugging Face dataset: "
                         f"{HF_PREFIX}NAME[:CONFIG][@SPLIT])", path=spec)
    records, lines = records_from_rows(header, rows, columns.mapping(), domain=domain, path=spec)
    check_unique(records, path=spec)
    return records, lines
