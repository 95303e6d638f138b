"""Reading user-facing YAML (study configs given with --config, study.yaml read back from a run directory).

Values are read with yaml.safe_load (the house rule: no other loader constructs anything). One check runs before it:
a mapping key given twice (``seed: 1`` then ``seed: 2``), which safe_load silently resolves to the last value, is an
error naming its line. The check walks the document's node tree (yaml.compose with SafeLoader: it builds nodes,
never Python objects), so no loader subclass is needed. `read_yaml` reads a file and turns every problem into an
InputError naming the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from leakaudit.errors import InputError

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that gives one key twice. `key`, `line` (1-based, the second occurrence) and `first_line`."""

    def __init__(self, key: str, node: yaml.Node, first: yaml.Node):
        self.key, self.line, self.first_line = key, node.start_mark.line + 1, first.start_mark.line + 1
        super().__init__(problem=f"duplicate key {key!r} (first given at line {self.first_line})",
                         problem_mark=node.start_mark)


def check_unique_keys(text: str) -> None:
    """DuplicateKeyError at the first mapping of `text` that writes one scalar key twice (a key a merge, ``<<:
    *anchor``, supplies may be overridden: only the keys written in the mapping count); yaml.YAMLError on bad YAML."""
    stack, seen_nodes = [yaml.compose(text, Loader=yaml.SafeLoader)], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen_nodes:  # an alias points at a node already walked
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_of: dict[tuple[str, str], yaml.Node] = {}
            for key_node, value_node in node.value:
                stack.append(value_node)
                if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                first = first_of.setdefault((key_node.tag, key_node.value), key_node)
                if first is not key_node:
                    raise DuplicateKeyError(key_node.value, key_node, first)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def load_yaml(text: str) -> Any:
    """yaml.safe_load(text) after check_unique_keys: yaml.YAMLError on bad YAML or a duplicate key."""
    check_unique_keys(text)
    return yaml.safe_load(text)


def read_yaml(path: str | Path) -> Any:
    """The YAML document in `path` (None when empty), read by load_yaml (yaml.safe_load). InputError naming the
    file, and the line where YAML marks it, when it cannot be read, is not YAML or repeats a key."""
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
