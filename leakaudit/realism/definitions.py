"""The realism card's fixed vocabulary: its levels, the thresholds its summary applies and the definitions it
writes into realism.json next to the numbers."""

from __future__ import annotations

LEVELS = ("all", "members", "non_members", "held_out")
REPEAT_N = 4
"""n of the seq-rep-n repetition measure (samples.seq_rep_4)."""
DEGENERATE_REPETITION = 0.5
"""Pooled seq-rep-4 from which the summary line calls a domain's samples a loop: half of every sample's 4-grams
repeat an earlier one (natural text of this length has almost none; the medical copying-teacher students of run
MO0, which repeat one line, score 0.61-0.71)."""
BASE_QUALITY = ("not available: the run stores no samples of the base model (signals/fresh/ holds the targets' "
                "samples only), and the card runs no model")
ESTIMATE_NOTE = ("Monte-Carlo estimates on the target's own stored samples: E_{y ~ sampler}[log p_target(y) - "
                 "log p_base(y)] and E[-log p_target(y)]; unbiased for KL(target || base) and the target's entropy "
                 "only when the sampler is the target (temperature 1, top_p 1)")
DEFINITIONS = {
    "kl.per_token": "sum over sampled tokens of (log p_target - log p_base) / tokens, nats/token",
    "kl.per_sequence": "mean over trajectories of sum over its tokens of (log p_target - log p_base), nats",
    "entropy.per_token": "-sum over sampled tokens of log p_target / tokens, nats/token",
    "entropy.per_sequence": "-mean over trajectories of sum over its tokens of log p_target, nats",
    "estimates": ESTIMATE_NOTE,
    "samples.distinct_fraction": "mean over records of distinct token sequences / trajectories",
    "samples.empty_fraction": "trajectories whose decoded text (special tokens skipped) is blank",
    "samples.at_cap_fraction": "trajectories with max_new_tokens tokens (cut off by the cap)",
    "samples.seq_rep_4": "mean over trajectories of 4 tokens or more of 1 - distinct 4-grams / 4-grams of the "
                         "token ids (seq-rep-4; 0 = no 4-gram repeats, near 1 = a loop)",
    "quality": "mean over records of the mean over the record's samples of the domain's measure",
    "held_out": "candidates the target never trained on (meta.json record_ids; else its non-members; every "
                "candidate of a null target)",
}
