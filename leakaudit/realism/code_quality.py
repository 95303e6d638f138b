"""Code task quality: similarity of a decoded sample to the canonical body, and whether it parses as Python (parsed
with ``ast.parse`` only: nothing a model wrote is compiled or executed)."""

from __future__ import annotations

import ast
import difflib
import re
import textwrap


def code_similarity(sample: str, body: str) -> float:
    """difflib.SequenceMatcher(None, sample, body, autojunk=False).ratio() over the whole texts, in [0, 1]."""
    return difflib.SequenceMatcher(None, sample, body, autojunk=False).ratio()


def _unfenced(sample: str) -> str:
    """The inside of the first ``` fenced block (to its end if unclosed); the sample itself without a fence."""
    m = re.search(r"```[^\n]*\n(.*?)(?:```|\Z)", sample, re.DOTALL)
    return m.group(1) if m else sample


def parses_as_python(sample: str) -> bool:
    """Whether the sample (its first fenced block if it has one), dedented, is Python that ``ast.parse`` accepts
    (a body's top-level ``return`` parses). Only parsed: nothing is compiled or executed. Blank: False."""
    code = textwrap.dedent(_unfenced(sample))
    if not code.strip():
        return False
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True
