"""Deterministic restatements of a record's privileged text in another surface form: the SFT targets of the
*restated* teacher (`teacher.kind: restated`).

The copying teacher (`teacher.kind: prepared`) is fine-tuned to reproduce the privileged text from its context,
so the students are pulled toward the very tokens the fixed-text attacks score. The restated teacher is
fine-tuned on the same contexts (prompt + privileged) to answer *from* them in its own words; here "its own
words" are fixed rules, one per domain, so the targets are reproducible and checkable:

- **code** (``code.ast``, ``code.return_local``, ``code.unparse``): locals renamed to neutral names and the body
  written back by ``ast.unparse``; never executed (leakaudit/data/restate/code_rule.py states the rule);
- **math** (``math.steps``): the final answer first, then the steps renumbered and reworded (math_rule.py);
- **medical** (``medical.findings``): the conclusion first, then the deciding findings by key (medical_rule.py).

**Fallback, stated and counted** (``rule = "verbatim.<reason>"``): a record none of the rules can restate
(code: no ```python block in the prompt, a body that does not parse in it, a body that adds module-level
statements, a transform that leaves the text unchanged or fails its own check; math: no ``Final answer:`` or
no steps; medical: not the note layout; any other domain) gets its privileged text back unchanged, and
``Restatement.is_verbatim`` is True. `shadow_models.teacher_prep.prepare_teacher` with ``sft_target="restated"`` leaves such records out of
the teacher's SFT set (the restated teacher is never trained to copy) and records the counts in its meta.json;
`rule_counts` counts rules over any records.

The parts: ``result`` (what a rule returns), ``code_rule``, ``math_rule``, ``medical_rule`` (one domain's rule
each) and ``by_domain`` (the rule of a record's domain, and the counts).
"""

from leakaudit.data.restate.by_domain import plan_statement, restate, restatement, rule_counts
from leakaudit.data.restate.code_rule import INTROSPECTION, NEUTRAL_PREFIX, restate_code
from leakaudit.data.restate.math_rule import MATH_REWORDING, restate_math, reword, roman
from leakaudit.data.restate.medical_rule import finding_groups, restate_medical
from leakaudit.data.restate.result import Restatement

__all__ = ["INTROSPECTION", "MATH_REWORDING", "NEUTRAL_PREFIX", "Restatement", "finding_groups", "plan_statement", "restate",
           "restate_code", "restate_math", "restate_medical", "restatement", "reword", "roman", "rule_counts"]
