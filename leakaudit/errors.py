"""Exceptions that carry where bad input came from, so the CLI can name the file, record and field."""

from __future__ import annotations


class LeakauditError(Exception):
    """Base class for user-facing errors; the CLI prints the message and exits with code 2."""


class InputError(LeakauditError):
    """Bad user input: names the file, the line or record, and the field when known."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 record_id: str | None = None, field: str | None = None):
        self.path, self.line, self.record_id, self.field = path, line, record_id, field
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if record_id is not None:
            where.append(f"record {record_id}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ConfigError(LeakauditError):
    """A study or audit configuration value is out of range or inconsistent."""
