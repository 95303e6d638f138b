"""The math rule of leakaudit.data.restate (``rule = "math.steps"``): the CHAMP layout (``Step-wise solution:`` / ``1.
...`` / ``Final answer: ...``; also a plain worked solution with a known ``answer``, e.g. gsm8k's): the final answer
first (``Answer: ...``), then ``Reasoning:`` and the steps renumbered with roman numerals ``(i)``, ``(ii)``, ...,
each reworded by the fixed phrase table `MATH_REWORDING` (one left-to-right pass, word boundaries, so a replacement
is never replaced again).
"""

from __future__ import annotations

import re

from leakaudit.data.records import Record
from leakaudit.data.restate.result import Restatement


MATH_REWORDING: dict[str, str] = {
    "Thus,": "Hence,", "Thus": "Hence", "thus": "hence",
    "Hence,": "Therefore,", "Hence": "Therefore", "hence": "therefore",
    "Therefore,": "Thus,", "Therefore": "Thus", "therefore": "thus",
    "So,": "Consequently,", "So": "Consequently,",
    "We have": "One gets", "we have": "one gets",
    "We get": "One obtains", "we get": "one obtains",
    "We can": "One can", "we can": "one can",
    "Since": "As", "since": "because", "Because": "Since", "because": "since",
    "There are": "There exist", "there are": "there exist",
    "There is": "There exists", "there is": "there exists",
    "The number of": "The count of", "the number of": "the count of",
    "which is": "that is",
    "Suppose": "Assume", "Assume": "Suppose", "Consider": "Take",
    "Then": "Next",
    "In total": "Altogether", "in total": "altogether",
    "Note that": "Observe that", "note that": "observe that",
    "However,": "Nevertheless,", "Furthermore": "Moreover", "Moreover": "Furthermore",
    "Plugging": "Substituting", "Substituting": "Plugging",
}
"""Fixed phrase table of the math rule: applied in one left-to-right pass (longest phrase first at each
position, whole words only), so a replacement is never replaced again."""
_REWORD = re.compile(r"(?<![\w])(" + "|".join(re.escape(k) for k in sorted(MATH_REWORDING, key=len, reverse=True))
                     + r")(?![\w])")
_CHAMP_HEADER = "Step-wise solution:\n"
_FINAL = "\nFinal answer: "


def reword(text: str) -> str:
    """`text` with every phrase of MATH_REWORDING replaced once."""
    return _REWORD.sub(lambda m: MATH_REWORDING[m.group(1)], text)


def roman(n: int) -> str:
    """1 -> 'i', 4 -> 'iv', 14 -> 'xiv' (n >= 1)."""
    out = ""
    for value, letters in ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l"),
                           (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
        while n >= value:
            out, n = out + letters, n - value
    return out


def _champ_steps(body: str) -> list[str]:
    """Split '1. a\\n2. b\\n...' into steps; a line not starting with the next number continues the step."""
    steps: list[str] = []
    for line in body.split("\n"):
        prefix = f"{len(steps) + 1}. "
        if line.startswith(prefix):
            steps.append(line[len(prefix):])
        elif steps:
            steps[-1] += "\n" + line
        elif line.strip():
            return []
    return steps


def restate_math(record: Record) -> Restatement:
    """Math rule (module docstring): answer first, steps renumbered (i), (ii), ... and reworded."""
    text = record.privileged
    answer = record.answer
    if answer is not None and text.endswith(_FINAL + answer):
        body = text[:-len(_FINAL + answer)]
    elif _FINAL in text:
        body, answer = text.rsplit(_FINAL, 1)
    else:
        return Restatement(text, "verbatim.math_no_final_answer")
    if body.startswith(_CHAMP_HEADER):
        steps = _champ_steps(body[len(_CHAMP_HEADER):])
    else:
        steps = [line for line in body.split("\n") if line.strip()]
    if not steps or not answer.strip():
        return Restatement(text, "verbatim.math_no_steps")
    lines = [f"Answer: {answer}", "Reasoning:"]
    lines += [f"({roman(i)}) {reword(step)}" for i, step in enumerate(steps, start=1)]
    return Restatement("\n".join(lines), "math.steps")
