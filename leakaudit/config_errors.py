"""Pydantic's validation errors of a study config as one ConfigError message naming each dotted location.

    training.epochz: unknown key; expected one of epochs, learning_rate, ...
    data.n_candidates: must be an even number >= 4, got 5          (a section's own __post_init__ message)
    2 problems in the study config: seed: ...; plan.n_students: ...
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Annotated, Any

from pydantic import ValidationError


def describe_errors(error: ValidationError, root: type) -> str:
    """The message of the ConfigError for `error`, raised validating the dataclass `root` (StudyConfig)."""
    problems = [_describe(err, root) for err in error.errors()]
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems in the study config: " + "; ".join(problems)


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _strip(tp: Any) -> Any:
    """Annotated[X, ...] -> X; X | None -> X."""
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _section_at(root: type, loc: tuple[Any, ...]) -> Any:
    """The type at `loc` inside `root` (None when the path leaves the schema)."""
    tp: Any = root
    for part in loc:
        tp = _strip(tp)
        origin = typing.get_origin(tp)
        if dataclasses.is_dataclass(tp) and isinstance(part, str):
            hints = typing.get_type_hints(tp)
            if part not in hints:
                return None
            tp = hints[part]
        elif origin in (list, tuple) and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return _strip(tp)


def _field_names(root: type, loc: tuple[Any, ...]) -> list[str]:
    tp = _section_at(root, loc)
    return [f.name for f in dataclasses.fields(tp)] if dataclasses.is_dataclass(tp) else []


def _describe(err: Any, root: type) -> str:
    """One pydantic error as one line naming its dotted location."""
    loc = tuple(err["loc"])
    where = _dotted(loc)
    kind = err["type"]
    if kind == "config":
        msg = err["ctx"]["message"]
        if not where or (msg.startswith(where) and msg[len(where):len(where) + 1] in (".", ":", " ", "=", "[")):
            return msg  # the section's own message already names its full location
        head = re.match(r"[A-Za-z_]\w*", msg)
        if head and head.group() in _field_names(root, loc):
            return f"{where}.{msg}"  # e.g. training + "epochs=0: must be ..." -> training.epochs=0: must be ...
        return f"{where}: {msg}"
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        known = _field_names(root, loc[:-1])
        return f"{where}: unknown key" + (f"; expected one of {', '.join(known)}" if known else "")
    if kind == "missing":
        return f"{where}: required"
    value = err.get("input")
    got = repr(value)
    got = f" (got {got})" if len(got) <= 60 and not isinstance(value, dict) else ""
    return f"{where or 'study config'}: {err['msg']}{got}"
