"""The interface every signal backend implements: sample fresh trajectories, score token sequences.

Shapes: P prompts, n trajectories per prompt, T tokens (ragged, per sequence), V vocabulary size.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Protocol, runtime_checkable

import numpy as np
from pydantic import ConfigDict

from leakaudit.errors import ConfigError

BACKEND_KINDS = ("transformers", "vllm")


@dataclass(frozen=True)
class SamplingConfig:
    """How fresh trajectories are drawn from a target student."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # not a field: leakaudit.config validates study configs with it

    n_per_record: int = 4
    """Trajectories per prompt (>= 1)."""
    temperature: float = 1.0
    """Softmax temperature (> 0); 1.0 samples the model's own distribution."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]; 1.0 disables nucleus filtering."""
    max_new_tokens: int = 128
    """Upper bound on completion length (>= 1); a completion stops earlier at EOS (kept)."""
    seed: int | None = None
    """Sampling seed (>= 0). Trajectory j of a prompt is a function of (seed, prompt ids, j) only. None = not
    chosen yet: a study derives it per target from its master seed; sampling refuses None (sampler.row_seed)."""
    batch_size: int = 16
    """Sequences decoded together (>= 1); does not change the sampled tokens (see the backend's notes)."""

    def __post_init__(self) -> None:
        if not isinstance(self.n_per_record, int) or self.n_per_record < 1:
            raise ConfigError(f"n_per_record must be an integer >= 1, got {self.n_per_record!r}")
        if not self.temperature > 0 or not np.isfinite(self.temperature):
            raise ConfigError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0):
            raise ConfigError(f"seed must be an integer >= 0 or None, got {self.seed!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TokenScores:
    """Teacher-forced scores of one continuation of length T.

    logp: float32 [T], logp[t] = log p(cont[t] | prefix + cont[:t]).
    mu, sigma: float32 [T] or None; Min-K%++'s statistics of the next-token distribution at t:
        mu[t] = E_{z~p}[log p(z)], sigma[t] = sqrt(E_{z~p}[(log p(z) - mu[t])^2]), z over the whole vocabulary.
    """

    logp: np.ndarray
    mu: np.ndarray | None = None
    sigma: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "logp", np.asarray(self.logp, dtype=np.float32))
        for name in ("mu", "sigma"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, dtype=np.float32)
                if value.shape != self.logp.shape:
                    raise ValueError(f"{name} shape {value.shape} != logp shape {self.logp.shape}")
                object.__setattr__(self, name, value)


@runtime_checkable
class Backend(Protocol):
    """A model that can sample completions and score continuations (see docs/contracts.md, "Signals")."""

    def sample(self, prompts: list[list[int]], cfg: SamplingConfig) -> list[list[list[int]]]:
        """[P][n] completion ids: EOS kept when generated, nothing after it, no padding."""
        ...

    def score(self, prefixes: list[list[int]], continuations: list[list[int]], *,
              vocab_stats: bool = False) -> list[TokenScores]:
        """One TokenScores per (prefix, continuation) pair; mu/sigma filled only when vocab_stats."""
        ...


def make_backend(kind: str, model_ref: str, *, trust_remote_code: bool = False, **opts: Any) -> Backend:
    """Build a backend. kind: 'transformers' (CPU/GPU; `opts` are HFOptions fields) or 'vllm' (GPU; `opts` are
    VLLMBackend options). `opts` go to that backend unchanged; `open_backend` maps a study's settings instead."""
    if kind == "transformers":
        from leakaudit.signals.hf_backend import HFBackend

        return HFBackend(model_ref, trust_remote_code=trust_remote_code, **opts)
    if kind == "vllm":
        from leakaudit.signals.vllm_backend import VLLMBackend

        return VLLMBackend(model_ref, trust_remote_code=trust_remote_code, **opts)
    raise ConfigError(f"unknown backend kind '{kind}'; expected one of {list(BACKEND_KINDS)}")


def backend_options(kind: str, *, score_batch_size: int = 16, autocast_bf16: bool = False,
                    vllm_stats_topk: int = -1, share_prefix: bool = True, share_prefill: bool = False
                    ) -> dict[str, Any]:
    """The options of a study's `signals` section that backend `kind` understands.

    transformers: score_batch_size, autocast_bf16, share_prefix, share_prefill (HFOptions). vllm: stats_topk =
    vllm_stats_topk (-1: Min-K%++'s vocabulary statistics over the whole vocabulary, exact; k > 0: over the top k,
    an estimate; 0: refuse them). vLLM schedules its own batches and computes in the model's dtype, so
    score_batch_size and autocast_bf16 do not apply to it. share_prefix and share_prefill are ignored for vLLM
    rather than refused (the default share_prefix=True must work with the gpu-paper preset's vllm backend):
    - share_prefill: vLLM already prefills a prompt once for its n trajectories (a request with n > 1 fans out
      into n child requests that hit its prefix cache, enable_prefix_caching, on by default in VLLMBackend);
    - share_prefix: vLLM has no equivalent: scoring asks for prompt_logprobs, and vLLM (V1) does not read its
      prefix cache for such requests (cached blocks hold no logits), so every sequence is prefilled whole. The
      option changes only speed, never scores (the transformers backend's shared path is exact up to float
      noise), so ignoring it changes no result."""
    for name, value in (("share_prefix", share_prefix), ("share_prefill", share_prefill)):
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, got {value!r}")
    if kind == "transformers":
        return {"score_batch_size": score_batch_size, "autocast_bf16": autocast_bf16,
                "share_prefix": share_prefix, "share_prefill": share_prefill}
    if kind == "vllm":
        return {"stats_topk": vllm_stats_topk}
    raise ConfigError(f"unknown backend kind '{kind}'; expected one of {list(BACKEND_KINDS)}")


@contextlib.contextmanager
def open_backend(kind: str, model_ref: str, *, trust_remote_code: bool = False, score_batch_size: int = 16,
                 autocast_bf16: bool = False, vllm_stats_topk: int = -1, share_prefix: bool = True,
                 share_prefill: bool = False) -> Iterator[Backend]:
    """A backend for one block, built from a study's signal settings (each backend gets only the options it
    understands, see `backend_options`); the model is released when the block ends (one model in memory at a
    time). trust_remote_code (off by default) reaches the model load of either backend."""
    opts = backend_options(kind, score_batch_size=score_batch_size, autocast_bf16=autocast_bf16,
                           vllm_stats_topk=vllm_stats_topk, share_prefix=share_prefix, share_prefill=share_prefill)
    backend = make_backend(kind, model_ref, trust_remote_code=trust_remote_code, **opts)
    try:
        yield backend
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()
        del backend
        gc.collect()


def check_score_inputs(prefixes: list[list[int]], continuations: list[list[int]]) -> None:
    """Raise ValueError unless there is one non-empty prefix per continuation."""
    if len(prefixes) != len(continuations):
        raise ValueError(f"{len(prefixes)} prefixes but {len(continuations)} continuations")
    for i, prefix in enumerate(prefixes):
        if len(prefix) == 0:
            raise ValueError(f"prefix {i} is empty: the first continuation token needs a context")
