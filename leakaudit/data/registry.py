"""Decorator registry of record sources: name -> (loader, one-line description)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from leakaudit.data.records import Record
from leakaudit.errors import ConfigError

Loader = Callable[..., list[Record]]


@dataclass(frozen=True)
class SourceEntry:
    """A registered source: `loader(seed=..., **options)` returns every record of the source in canonical order."""

    name: str
    description: str
    loader: Loader


_REGISTRY: dict[str, SourceEntry] = {}  # filled only by @register_source at import time


def register_source(name: str, description: str) -> Callable[[Loader], Loader]:
    """Register the decorated function as the loader of source `name`."""

    def wrap(loader: Loader) -> Loader:
        if name in _REGISTRY:
            raise ValueError(f"source '{name}' registered twice")
        _REGISTRY[name] = SourceEntry(name, description, loader)
        return loader

    return wrap


def get_source(name: str) -> SourceEntry:
    """The registered entry for `name`, or ConfigError listing the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown data source '{name}'; known: {', '.join(sorted(_REGISTRY))}") from None


def source_descriptions() -> dict[str, str]:
    """name -> description for every registered source, sorted by name."""
    return {n: _REGISTRY[n].description for n in sorted(_REGISTRY)}
