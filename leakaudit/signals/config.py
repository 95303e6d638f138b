"""The study config's `signals` section: which backend samples and scores, and how (its `sampling` subsection is
leakaudit.signals.types.SamplingConfig).

Beside the backends it configures; validated with the rest of the study config by leakaudit.config (which re-exports
it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import StrictBool

from leakaudit.config_section import FORBID, Checked
from leakaudit.errors import ConfigError
from leakaudit.signals.types import SamplingConfig


@dataclass
class SignalsConfig:
    __pydantic_config__ = FORBID

    backend: str = "transformers"
    """'transformers' (CPU/GPU) or 'vllm' (GPU; optional extra, untested on CPU-only machines)."""
    sampling: Checked[SamplingConfig] = field(default_factory=SamplingConfig)
    """leakaudit.signals.SamplingConfig for fresh trajectories (n_per_record, temperature, ...). Its seed:
    null = derived by the study per target from the master `seed`; an int is used as is."""
    score_batch_size: int = 16
    """Sequences per forward pass when scoring."""
    autocast_bf16: StrictBool = False
    """bf16 autocast for scoring. Off by default: its per-token error (mean 0.016, max 0.18 nats on
    smollm2-135m, bench/bench_signals.py) is the size of the gaps attacks look for. Sampling runs on a bf16
    copy of the weights where bf16 is native either way (every model then scores the samples in fp32)."""
    vllm_stats_topk: int = -1
    """vLLM only: log-probs returned per position for Min-K%++'s vocabulary statistics; -1 = the whole
    vocabulary (exact, heavy), k > 0 = an estimate from the top k."""
    share_prefix: StrictBool = True
    """transformers backend: score the n trajectories of a record from one KV cache of their shared prompt
    instead of re-running the prompt per trajectory (HFOptions.share_prefix). Changes only speed: the scores
    equal the per-sequence path's up to float noise (fp32 max abs diff 2.5e-5 / 2.9e-5 nats on smollm2-135m,
    the size of batched vs one-by-one plain scoring; tests/test_prefix_scoring.py holds it to 1e-5 on a tiny
    model), and scoring the default preset's trajectories runs 1.78x / 1.82x faster (bench/results/
    signals_prefix.json, signals_stage.json). Only score_fresh repeats prompts; score_fixed is unchanged. vLLM:
    ignored (its prompt-logprob requests bypass its prefix cache; scores are the same either way)."""
    share_prefill: StrictBool = False
    """transformers backend: sample the n trajectories of a prompt from one prefill of it, in a decode loop of
    leakaudit's own instead of model.generate (HFOptions.share_prefill). Off: it did not pay (0.91-1.14x on
    smollm2-135m, median 1.02x, bench/results/signals_prefix.json; decoding, not the prefill, dominates), and
    under bf16 sampling it draws other tokens than the generate path (4/32 trajectories identical; in fp32 the
    same tokens). vLLM: ignored (a request with n > 1 already prefills its prompt once, via vLLM's prefix
    cache)."""

    def __post_init__(self) -> None:
        if self.backend not in ("transformers", "vllm"):
            raise ConfigError(f"signals.backend: must be 'transformers' or 'vllm', got {self.backend!r}")
        if self.score_batch_size < 1:
            raise ConfigError(f"signals.score_batch_size: must be >= 1, got {self.score_batch_size}")
        if self.vllm_stats_topk != -1 and self.vllm_stats_topk < 1:
            raise ConfigError(f"signals.vllm_stats_topk: must be -1 (whole vocabulary) or >= 1, "
                              f"got {self.vllm_stats_topk}")
