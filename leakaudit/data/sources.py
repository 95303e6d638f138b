"""One entry point for every record source: `load_source(name, limit=, seed=, **options)`.

Each family lives in its own module and registers its loader with `@register_source`; importing this
module imports them all. Sources: offline packages (champ, humaneval, medical), Hugging Face hub datasets
(gsm8k, math, medqa, medmcqa, pubmedqa, mbpp) and the user's own files (file).
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Mapping

from pydantic import TypeAdapter, ValidationError

from leakaudit.data import champ, hub_code, hub_math, hub_medical, humaneval, medical, user_files  # noqa: F401
from leakaudit.data.records import Record, check_token_budget, check_unique
from leakaudit.data.registry import get_source, source_descriptions
from leakaudit.data.subset import seeded_subset
from leakaudit.errors import ConfigError


def available_sources() -> dict[str, str]:
    """name -> one-line description of every source `load_source` accepts."""
    return source_descriptions()


def _type_name(hint: Any) -> str:
    """`str | Path | None`, `Mapping[str, str] | None`: the annotation without module prefixes."""
    text = getattr(hint, "__name__", None) if isinstance(hint, type) else None
    text = text or str(hint)
    return re.sub(r"\b(typing|pathlib|collections\.abc)\.", "", text)


def check_option_types(loader: Any, options: Mapping[str, Any], *, where: str = "options") -> None:
    """ConfigError naming `<where>.<key>` for each option whose value does not have the type the loader (or
    load_source, for `limit`) annotates it with; checked strictly by pydantic (no "5" -> 5 coercion, no bool for
    int, no str for a list of str). Options with no annotation, or whose annotation pydantic cannot check, pass."""
    try:
        hints = typing.get_type_hints(loader)
        hints["limit"] = typing.get_type_hints(load_source)["limit"]
    except Exception:  # an annotation that cannot be resolved: nothing to check against
        return
    for key, value in options.items():
        hint = hints.get(key)
        if hint is None or key in ("seed", "return"):
            continue
        try:
            adapter = TypeAdapter(hint)
        except Exception:  # not a type pydantic knows (e.g. an arbitrary class): left to the loader
            continue
        try:
            adapter.validate_python(value, strict=True)
        except ValidationError as e:
            errors = e.errors()
            loc = errors[0]["loc"] if len(errors) == 1 else ()
            inner = "".join(f"[{p!r}]" for p in loc if isinstance(p, (int, str)) and _in(value, p))
            got = f"{value!r}" if len(repr(value)) <= 80 else f"a {type(value).__name__}"
            raise ConfigError(f"{where}.{key}{inner}: expected {_type_name(hint)}, got {got} "
                              f"({type(value).__name__}): {errors[0]['msg']}") from None


def _in(value: Any, part: Any) -> bool:
    """Whether a pydantic error location part indexes into `value` (a key or a list index), not a union tag."""
    if isinstance(value, Mapping):
        return part in value
    return isinstance(value, (list, tuple)) and isinstance(part, int) and 0 <= part < len(value)


def check_source_options(name: str, options: Mapping[str, Any], *, where: str = "options") -> None:
    """Check, without loading anything, that `name` is a registered source and that every key of `options` is a
    keyword its loader accepts (or `limit`, which load_source takes itself); loaders' parameters without a default
    must be given; every value must have the type the loader's annotation (or load_source's, for `limit`) names.
    ConfigError names `<where>.<key>` (e.g. data.domains.code.options.tabels)."""
    entry = get_source(name)
    if not isinstance(options, Mapping):
        raise ConfigError(f"{where}: expected a mapping of option names to values, got {options!r}")
    params = inspect.signature(entry.loader).parameters
    check_option_types(entry.loader, options, where=where)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = {n for n, p in params.items()
                if n != "seed" and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    accepted.add("limit")
    for key in options:
        if key not in accepted:
            raise ConfigError(f"{where}.{key}: unknown option for source '{name}'; accepted: "
                              f"{', '.join(sorted(accepted))}")
    for n, p in params.items():
        if n in accepted and p.default is inspect.Parameter.empty and n not in options:
            raise ConfigError(f"{where}.{n}: required by source '{name}'")


def load_source(name: str, *, limit: int | None = None, seed: int = 0, tokenizer: Any = None,
                max_tokens: int | None = None, **options: Any) -> list[Record]:
    """Load the records of source `name`.

    limit: keep a seeded random subset of this size (original order kept); seed also drives any sampling
    the source itself does (e.g. which patient rows form the medical pool).
    tokenizer, max_tokens: when both given, reject records whose prompt or privileged text is longer.
    options: passed to the source's loader (see each module), e.g. `path=`, `columns=`, `tables=`, `split=`.
    Raises InputError on bad data (naming file, line or record, and field) and on duplicate record ids.
    """
    entry = get_source(name)
    check_source_options(name, {**options, "limit": limit} if limit is not None else options)
    records = entry.loader(seed=seed, **options)
    where = str(options.get("path") or options.get("data_files") or name)
    check_unique(records, path=where)
    records = seeded_subset(records, limit, seed)
    if max_tokens is not None:
        if tokenizer is None:
            raise ConfigError("max_tokens needs a tokenizer")
        check_token_budget(records, tokenizer, max_tokens, path=where)
    return records
