"""Monte-Carlo estimates over stored log-probs of a target's own samples: KL(target || base) and the target's
entropy, per token and per sequence (nats). Unbiased only when the sampler is the target (temperature 1, top_p 1)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from leakaudit.realism.rounding import rounded


def _finite_pairs(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(a_i, b_i) pairs of equal-length float arrays with no NaN in either."""
    out = []
    for x, y in zip(a, b):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if len(x) != len(y):
            raise ValueError(f"log-prob arrays of one trajectory differ in length: {len(x)} vs {len(y)}")
        if np.isfinite(x).all() and np.isfinite(y).all():
            out.append((x, y))
    return out


def _estimate(sums: Sequence[float], n_tokens: int, n_skipped: int) -> dict:
    """{per_token: sum(sums) / n_tokens (nats/token), per_sequence: mean(sums) (nats), n_trajectories (len(sums)),
    n_tokens, n_skipped}; per_sequence None without a sum, per_token None without a token."""
    return {"per_token": rounded(sum(sums) / n_tokens) if n_tokens else None,
            "per_sequence": rounded(float(np.mean(sums))) if sums else None,
            "n_trajectories": len(sums), "n_tokens": int(n_tokens), "n_skipped": n_skipped}


def kl_estimate(logp_target: Sequence[np.ndarray], logp_base: Sequence[np.ndarray]) -> dict:
    """KL(target || base) on the target's samples. logp_target / logp_base: per trajectory, float [T_i] log-probs
    of the same sampled tokens (aligned). Returns {per_token: sum_i sum_t (lt - lb) / sum_i T_i (nats/token),
    per_sequence: mean_i sum_t (lt - lb) (nats), n_trajectories, n_tokens, n_skipped (a NaN in either)};
    None values without a usable trajectory (per_token also without a token)."""
    pairs = _finite_pairs(logp_target, logp_base)
    sums = [float((x - y).sum()) for x, y in pairs]
    n_tok = sum(len(x) for x, _ in pairs)
    return _estimate(sums, n_tok, len(logp_target) - len(pairs))


def entropy_estimate(logp_target: Sequence[np.ndarray]) -> dict:
    """Entropy of the target from its own samples. logp_target: per trajectory, float [T_i]. Returns {per_token:
    -sum_i sum_t lt / sum_i T_i (nats/token), per_sequence: -mean_i sum_t lt (nats), n_trajectories, n_tokens,
    n_skipped}; >= 0 for log-probs <= 0."""
    pairs = _finite_pairs(logp_target, logp_target)
    sums = [float(-x.sum()) for x, _ in pairs]
    n_tok = sum(len(x) for x, _ in pairs)
    return _estimate(sums, n_tok, len(logp_target) - len(pairs))
