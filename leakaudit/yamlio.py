"""Reading user-facing YAML (study configs given with --config, study.yaml read back from a run directory).

One loader for all of them: `UniqueKeySafeLoader` is yaml.SafeLoader (safe: no python tags are constructed, the same
as yaml.safe_load) with one addition, a mapping key given twice (``seed: 1`` then ``seed: 2``) is an error naming its
line instead of silently keeping the last value. `read_yaml` reads a file with it and turns every problem into an
InputError naming the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from leakaudit.errors import InputError


class DuplicateKeyError(ConstructorError):
    """A mapping that gives one key twice. `key`, `line` (1-based, the second occurrence) and `first_line`."""

    def __init__(self, key: Any, node: yaml.Node, first: yaml.Node):
        self.key, self.line, self.first_line = key, node.start_mark.line + 1, first.start_mark.line + 1
        super().__init__(None, None, f"duplicate key {key!r} (first given at line {self.first_line})",
                         node.start_mark)


class UniqueKeySafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader (so `yaml.load(text, Loader=UniqueKeySafeLoader)` is as safe as yaml.safe_load) that refuses a
    mapping with a duplicate key (DuplicateKeyError, a yaml ConstructorError)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            # only the keys written in this mapping: a key a merge (<<: *anchor) supplies may be overridden
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if getattr(key_node, "tag", None) == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable key: SafeLoader's own construct_mapping reports it
                if first is not None:
                    raise DuplicateKeyError(key, key_node, first)
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse YAML text with UniqueKeySafeLoader (a yaml.SafeLoader): yaml.YAMLError on bad YAML or a duplicate key."""
    return yaml.load(text, Loader=UniqueKeySafeLoader)  # noqa: S506 - the loader is a yaml.SafeLoader subclass


def read_yaml(path: str | Path) -> Any:
    """The YAML document in `path` (None when empty), read with UniqueKeySafeLoader (a yaml.SafeLoader). InputError
    naming the file, and the line where YAML marks it, when it cannot be read, is not YAML or repeats a key."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the file: {e}", path=str(p)) from e
    try:
        return load_yaml(text)
    except DuplicateKeyError as e:
        raise InputError(f"duplicate key {e.key!r} (first given at line {e.first_line}); give each key once",
                         path=str(p), line=e.line) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise InputError(f"invalid YAML: {problem}", path=str(p),
                         line=mark.line + 1 if mark is not None else None) from None
