"""Replace privileged text with "[redacted]" in everything a report shows (config, leak map, free text)."""

from __future__ import annotations

from dataclasses import dataclass

REDACTED = "[redacted]"
TOKEN_MASK = "█"
PRIVILEGED_KEYS = frozenset({"privileged", "examples", "records", "answer", "solution", "rationale",
                             "secret", "secrets", "teacher_context"})


@dataclass(frozen=True)
class Redactor:
    """`secrets`: literal strings to scrub from any text (e.g. the privileged text of every record)."""

    secrets: tuple[str, ...] = ()
    min_len: int = 8

    def text(self, s: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            if len(secret) >= self.min_len:
                s = s.replace(secret, REDACTED)
        return s

    def config(self, obj):
        """Recursively: values under privileged keys become "[redacted]", other strings are scrubbed."""
        if isinstance(obj, dict):
            return {k: REDACTED if str(k).lower() in PRIVILEGED_KEYS else self.config(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.config(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def leak_map(self, lm: dict) -> dict:
        """Keep the gaps (the colours), mask every token as one block and drop the prompt."""
        out = {k: v for k, v in lm.items() if k not in ("prompt", "trajectories")}
        if "prompt" in lm:
            out["prompt"] = REDACTED
        out["trajectories"] = [{"tokens": [TOKEN_MASK] * len(t["tokens"]), "gaps": list(t["gaps"])}
                               for t in lm["trajectories"]]
        out["redacted"] = True
        return out
