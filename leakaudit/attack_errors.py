"""An attack's error (attacks.errors) as the pipeline's user-facing error, with the same message.

attacks/ imports nothing of leakaudit's, so it raises its own classes. Wherever the pipeline runs an attack it does so
inside `user_errors_from_attacks()`, so bad input reaches the user as any other bad input does (one line naming the
record and field, exit code 2, nothing written):

    AttackInputError     -> InputError (the same record and field)
    AttackConfigError    -> ConfigError
    AttackContractError  -> LeakauditError (a bug in an attack, reported as one line)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from attacks.errors import AttackConfigError, AttackError, AttackInputError
from leakaudit.errors import ConfigError, InputError, LeakauditError


def user_error(error: AttackError) -> LeakauditError:
    """The pipeline's error for an attack's error: same message, the class the CLI turns into exit code 2."""
    if isinstance(error, AttackInputError):
        return InputError(error.message, record_id=error.record_id, field=error.field)
    if isinstance(error, AttackConfigError):
        return ConfigError(str(error))
    return LeakauditError(str(error))


@contextmanager
def user_errors_from_attacks() -> Iterator[None]:
    """Inside it, an AttackError is raised again as `user_error(it)` (chained to the original)."""
    try:
        yield
    except AttackError as e:
        raise user_error(e) from e
