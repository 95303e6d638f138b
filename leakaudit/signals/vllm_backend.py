"""Thin vLLM adapter (GPU). vllm is imported only when a VLLMBackend is built.

The conversions from vLLM's output objects are pure functions over duck-typed attributes, testable without vllm:
- a RequestOutput has `.outputs` (CompletionOutput list, each with `.index`, `.token_ids`) and `.prompt_logprobs`;
- `prompt_logprobs` is a list with one entry per prompt token: None for the first token, else a mapping
  token_id -> Logprob (an object with `.logprob`; plain floats are accepted too) that always contains the
  prompt's own token.

Scoring sends prefix + continuation as one prompt with `max_tokens=1` and reads `prompt_logprobs`. vLLM (V1)
does not read its prefix cache for a request that asks for prompt log-probs (cached blocks hold no logits), so
each sequence is prefilled whole: there is no counterpart of the transformers backend's share_prefix here (the
study's signals.share_prefix is ignored for vLLM; it never changes scores). Sampling sends one request per prompt
with n trajectories, whose prompt vLLM prefills once (its counterpart of share_prefill, also ignored here).
Min-K%++ vocabulary statistics need the full next-token
distribution: ask for it with `stats_topk=-1` (every token; exact, but heavy) or a top-k (an estimate over the
k most likely tokens, which underestimates the spread). The transformers backend computes them exactly and
cheaply, so prefer it for `score_fixed`.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from leakaudit.errors import ConfigError, LeakauditError
from leakaudit.signals.types import SamplingConfig, TokenScores, check_score_inputs
from leakaudit.signals.sampler import row_seed, trim_completion


def _logprob_value(entry: Any) -> float:
    return float(getattr(entry, "logprob", entry))


def _position_dict(entry: Any) -> Mapping[int, Any]:
    if entry is None:
        raise ValueError("prompt_logprobs has no entry for a scored position (the first prompt token cannot be scored)")
    return entry


def scores_from_prompt_logprobs(prompt_logprobs: Sequence[Any], prefix_len: int, continuation: Sequence[int], *,
                                vocab_stats: bool = False) -> TokenScores:
    """TokenScores of `continuation` from one request's prompt_logprobs over prefix + continuation.

    prompt_logprobs: [prefix_len + T] entries (see module docstring). logp[t] is read at position
    prefix_len + t for token continuation[t]. With vocab_stats, mu/sigma are computed over the entries present
    at that position (exact when they cover the whole vocabulary).
    """
    n = len(continuation)
    if len(prompt_logprobs) < prefix_len + n:
        raise ValueError(f"prompt_logprobs has {len(prompt_logprobs)} positions, need {prefix_len + n}")
    logp = np.empty(n, dtype=np.float32)
    mu = np.empty(n, dtype=np.float32) if vocab_stats else None
    sigma = np.empty(n, dtype=np.float32) if vocab_stats else None
    for t, tok in enumerate(continuation):
        entry = _position_dict(prompt_logprobs[prefix_len + t])
        if int(tok) not in entry:
            raise ValueError(f"position {prefix_len + t}: token {tok} missing from prompt_logprobs")
        logp[t] = _logprob_value(entry[int(tok)])
        if vocab_stats:
            lp = np.fromiter((_logprob_value(v) for v in entry.values()), dtype=np.float64)
            p = np.exp(lp)
            m = float((p * lp).sum())
            mu[t] = m
            sigma[t] = np.sqrt(max(float((p * (lp - m) ** 2).sum()), 0.0))
    return TokenScores(logp, mu, sigma)


def completions_from_outputs(request_outputs: Iterable[Any], n: int, eos_ids: Sequence[int]) -> list[list[list[int]]]:
    """[P][n] completion ids from vLLM RequestOutputs (one per prompt, in prompt order).

    Each completion is cut after its first EOS (kept); a request must carry exactly n completions.
    """
    result = []
    for r, req in enumerate(request_outputs):
        outs = sorted(req.outputs, key=lambda o: getattr(o, "index", 0))
        if len(outs) != n:
            raise ValueError(f"request {r} returned {len(outs)} completions, expected {n}")
        result.append([trim_completion(list(o.token_ids), eos_ids) for o in outs])
    return result


class VLLMBackend:
    """vLLM behind the Backend protocol. options: dtype, gpu_memory_utilization, max_model_len, stats_topk,
    enable_prefix_caching, eos_token_ids, trust_remote_code (off by default); anything else goes to vllm.LLM
    unchanged. Weights load from safetensors only (a model directory of pickles is refused, and vLLM is told
    load_format='safetensors'). A LoRA adapter directory is refused: vLLM serves merged models."""

    def __init__(self, model_ref: str, *, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, stats_topk: int = 0, enable_prefix_caching: bool = True,
                 eos_token_ids: Sequence[int] | None = None, trust_remote_code: bool = False, **llm_kwargs: Any):
        from pathlib import Path

        from leakaudit.models import check_safetensors_only, resolve_model_ref

        if not isinstance(stats_topk, int) or isinstance(stats_topk, bool) or not (stats_topk == -1 or stats_topk >= 0):
            raise ConfigError(f"stats_topk must be -1 (whole vocabulary) or >= 0, got {stats_topk!r}")
        try:
            import vllm
        except ImportError as exc:
            raise LeakauditError("the vLLM backend needs the `vllm` package (GPU only): pip install "
                                 "'leakaudit[vllm]', or use backend 'transformers'") from exc
        path = resolve_model_ref(model_ref)
        check_safetensors_only(path)
        if (Path(path) / "adapter_config.json").is_file():
            raise ConfigError(f"{path} is a LoRA adapter; the vLLM backend needs a full model (train with "
                              "lora_rank=0, or use backend 'transformers', which merges adapters)")
        self._vllm = vllm
        self.stats_topk = stats_topk
        self.model_ref = model_ref
        llm_kwargs.setdefault("load_format", "safetensors")
        self.llm = vllm.LLM(model=path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                            max_model_len=max_model_len, enable_prefix_caching=enable_prefix_caching,
                            trust_remote_code=trust_remote_code,
                            max_logprobs=-1 if stats_topk == -1 else max(stats_topk, 20), **llm_kwargs)
        if eos_token_ids is None:
            tok = self.llm.get_tokenizer()
            eos_token_ids = [tok.eos_token_id]
        self.eos_token_ids = [int(e) for e in eos_token_ids]

    def _prompts(self, seqs: Sequence[Sequence[int]]) -> list[Any]:
        return [{"prompt_token_ids": list(s)} for s in seqs]

    def sample(self, prompts: list[list[int]], cfg: SamplingConfig) -> list[list[list[int]]]:
        """One request per prompt with n = cfg.n_per_record and a per-request seed row_seed(seed, prompt, 0):
        reproducible for the same seed and prompt whatever else is in the batch (vLLM's per-request generator)."""
        params = [self._vllm.SamplingParams(n=cfg.n_per_record, temperature=cfg.temperature, top_p=cfg.top_p,
                                            max_tokens=cfg.max_new_tokens, seed=row_seed(cfg.seed, p, 0) % (2**31),
                                            stop_token_ids=self.eos_token_ids)
                  for p in prompts]
        outputs = self.llm.generate(self._prompts(prompts), params, use_tqdm=False)
        return completions_from_outputs(outputs, cfg.n_per_record, self.eos_token_ids)

    def score(self, prefixes: list[list[int]], continuations: list[list[int]], *,
              vocab_stats: bool = False) -> list[TokenScores]:
        check_score_inputs(prefixes, continuations)
        if vocab_stats and self.stats_topk == 0:
            raise ConfigError("vocab_stats with vLLM needs stats_topk=-1 (exact) or > 0 (estimate); "
                              "the transformers backend computes them exactly")
        k = 0 if not vocab_stats else self.stats_topk
        params = self._vllm.SamplingParams(max_tokens=1, prompt_logprobs=k, temperature=1.0)
        seqs = [list(p) + list(c) for p, c in zip(prefixes, continuations)]
        outputs = self.llm.generate(self._prompts(seqs), params, use_tqdm=False)
        return [scores_from_prompt_logprobs(o.prompt_logprobs, len(p), c, vocab_stats=vocab_stats)
                for o, p, c in zip(outputs, prefixes, continuations)]
