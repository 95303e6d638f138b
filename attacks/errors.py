"""The attacks' own errors: attacks/ depends on nothing of leakaudit's, so it says what went wrong in these.

    AttackError            the base class
    AttackConfigError      an unknown attack, parameters it does not take or out of range, a bad registration
    AttackInputError       inputs an attack cannot score: a missing or malformed field, naming the record and field
    AttackContractError    an attack returned something other than float64 [N] member-high scores (a bug in it)

The pipeline turns each into its own user-facing error with the same message (leakaudit.errors.user_error).
"""

from __future__ import annotations


class AttackError(Exception):
    """Base class of every error the attacks package raises."""


class AttackConfigError(AttackError):
    """An attack name, its parameters or its registration is not valid."""


class AttackInputError(AttackError):
    """Inputs an attack cannot score: names the record and the field when known.

    The message reads ``record <id>, field '<name>': <problem>``, as leakaudit.errors.InputError words it."""

    def __init__(self, message: str, *, record_id: str | None = None, field: str | None = None):
        self.message, self.record_id, self.field = message, record_id, field
        where = [w for w in (f"record {record_id}" if record_id is not None else None,
                             f"field '{field}'" if field is not None else None) if w]
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class AttackContractError(AttackError):
    """An attack returned something other than float64 [N] member-high scores (a bug in that attack)."""
