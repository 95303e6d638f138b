"""Signal backends by kind: `make_backend` builds one (transformers or vLLM), `open_backend` holds one for a block.
The interface they implement (Backend, SamplingConfig, TokenScores) is in leakaudit.signals.types, imported here
for callers.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Iterator

from leakaudit.errors import ConfigError
from leakaudit.signals.types import Backend, SamplingConfig, TokenScores, check_score_inputs

BACKEND_KINDS = ("transformers", "vllm")


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


__all__ = ["BACKEND_KINDS", "Backend", "SamplingConfig", "TokenScores", "backend_options", "check_score_inputs",
           "make_backend", "open_backend"]
