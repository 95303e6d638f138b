"""Signals: fresh trajectories from a target and teacher-forced per-token log-probs (docs/contracts.md).

Backends live in hf_backend (transformers) and vllm_backend (vLLM); both are imported only by make_backend.
"""

from leakaudit.signals.backend import Backend, SamplingConfig, TokenScores, make_backend
from leakaudit.signals.stages import missing_logp, sample_fresh, score_fixed, score_fresh, score_fresh_all
from leakaudit.signals.store import (FixedScores, load_fixed, load_logp, load_prompts, load_trajectories, save_fixed,
                                     save_logp, save_trajectories)

__all__ = ["Backend", "SamplingConfig", "TokenScores", "make_backend", "sample_fresh", "score_fresh", "score_fresh_all",
           "score_fixed", "missing_logp", "FixedScores", "save_trajectories", "load_trajectories", "load_prompts", "save_logp",
           "load_logp", "save_fixed", "load_fixed"]
