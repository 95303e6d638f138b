"""A level's summary (KL, entropy, samples, quality) over rows of one or several targets, for every level of
``LEVELS``."""

from __future__ import annotations

from typing import Sequence

from leakaudit.realism.definitions import LEVELS
from leakaudit.realism.estimates import entropy_estimate, kl_estimate
from leakaudit.realism.quality import quality_summary
from leakaudit.realism.samples import sample_stats


def level_summary(records: Sequence[dict], max_new_tokens: int | None) -> dict:
    """kl, entropy, samples and quality over `records` (rows of `target_rows`): kl over the records whose target
    and base log-probs are stored, entropy over those with the target's (None when there are none)."""
    both = [r for r in records if r["logp_target"] is not None and r["logp_base"] is not None]
    have_t = [r for r in records if r["logp_target"] is not None]
    kl = kl_estimate([x for r in both for x in r["logp_target"]], [x for r in both for x in r["logp_base"]])
    return {"kl": kl if both else None,
            "entropy": entropy_estimate([x for r in have_t for x in r["logp_target"]]) if have_t else None,
            "samples": sample_stats(records, max_new_tokens), "quality": quality_summary(records)}


def levels(records: Sequence[dict], max_new_tokens: int | None) -> dict:
    """LEVELS -> level_summary over the records of that level (None for a level without records)."""
    pick = {"all": lambda r: True, "members": lambda r: r["is_member"] is True,
            "non_members": lambda r: r["is_member"] is False, "held_out": lambda r: r["held_out"] is True}
    out = {}
    for name in LEVELS:
        rows = [r for r in records if pick[name](r)]
        out[name] = level_summary(rows, max_new_tokens) if rows else None
    return out
