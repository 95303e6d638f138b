"""Statistics of a target's sampled token sequences: lengths, blank and capped samples, distinct samples per record,
and the seq-rep-n repetition of each trajectory (near 1 = a sample stuck in a loop)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from leakaudit.realism.definitions import REPEAT_N
from leakaudit.realism.rounding import rounded


def distinct_fraction(trajs: Sequence[np.ndarray]) -> float | None:
    """Distinct token sequences / trajectories of one record, in (0, 1]; None for no trajectory."""
    if not len(trajs):
        return None
    return len({tuple(np.asarray(t).tolist()) for t in trajs}) / len(trajs)


def seq_rep(tokens: np.ndarray, n: int = REPEAT_N) -> float | None:
    """1 - distinct n-grams / n-grams of one trajectory's token ids, in [0, 1); None below n tokens (no n-gram).
    Written here: seq-rep-n is a few lines over token ids, and no dependency of ours ships it."""
    t = np.asarray(tokens).tolist()
    grams = [tuple(t[i:i + n]) for i in range(len(t) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else None


def sample_stats(records: Sequence[dict], max_new_tokens: int | None) -> dict:
    """Over `records` (each {"tokens": [int arrays], "texts": [str] | None}): n_records, n_trajectories, mean_tokens,
    zero_length_fraction, at_cap_fraction (None without max_new_tokens), empty_fraction (decoded text blank; None
    without texts), distinct_fraction (mean over records), seq_rep_4 (mean over trajectories of REPEAT_N tokens or
    more; None without one)."""
    lengths = [len(t) for r in records for t in r["tokens"]]
    reps = [x for x in (seq_rep(t) for r in records for t in r["tokens"]) if x is not None]
    texts = [s for r in records for s in (r["texts"] or [])]
    have_texts = bool(records) and all(r["texts"] is not None for r in records)
    distinct = [d for d in (distinct_fraction(r["tokens"]) for r in records) if d is not None]
    n = len(lengths)
    return {"n_records": len(records), "n_trajectories": n,
            "mean_tokens": rounded(float(np.mean(lengths)), 2) if n else None,
            "zero_length_fraction": rounded(sum(x == 0 for x in lengths) / n) if n else None,
            "at_cap_fraction": rounded(sum(x >= max_new_tokens for x in lengths) / n) if n and max_new_tokens else None,
            "empty_fraction": rounded(sum(not s.strip() for s in texts) / len(texts)) if have_texts and texts else None,
            "distinct_fraction": rounded(float(np.mean(distinct))) if distinct else None,
            "seq_rep_4": rounded(float(np.mean(reps))) if reps else None}
