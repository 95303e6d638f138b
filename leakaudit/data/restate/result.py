"""What a restatement rule returns: the restated text, the rule that made it, and whether it is the verbatim
fallback."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Restatement:
    """A record's restated answer and the rule that made it (leakaudit.data.restate's docstring)."""

    text: str
    rule: str
    renamed: dict[str, str] = field(default_factory=dict)
    """code: old local name -> neutral name."""

    @property
    def is_verbatim(self) -> bool:
        """True when no rule applied and `text` is the privileged text unchanged."""
        return self.rule.startswith("verbatim.")
