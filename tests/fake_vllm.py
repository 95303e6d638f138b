"""A stand-in `vllm` package for CPU tests: records what leakaudit gives it and answers like vLLM.

`install_fake_vllm(monkeypatch)` puts a module named `vllm` into sys.modules (and returns it); the `fake_vllm`
fixture does the same for one test (`from fake_vllm import fake_vllm` in a test module registers it). The module
has what leakaudit.signals.vllm_backend uses:

- `LLM(model=..., **engine_args)`: refuses keyword arguments vLLM's engine does not take (as vLLM's EngineArgs
  does, with a TypeError), e.g. transformers-only options such as score_batch_size or autocast_bf16. It loads
  the checkpoint with transformers (fp32, CPU) so its answers are real log-probs and samples of that model.
  `get_tokenizer()`; `generate(prompts, sampling_params, use_tqdm=True)` with prompts as
  `{"prompt_token_ids": [...]}` dicts and one SamplingParams or one per prompt; returns RequestOutputs.
- `SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=16, seed=None, stop_token_ids=None,
  prompt_logprobs=None, logprobs=None, ...)`: unknown keywords are a TypeError, as in vLLM.
- RequestOutput: `.prompt_token_ids`, `.outputs` (CompletionOutput: `.index`, `.token_ids`, `.finish_reason`) and
  `.prompt_logprobs` (None unless asked: one entry per prompt token, None for the first, else a mapping token id
  -> Logprob(`.logprob`, `.rank`, `.decoded_token`) holding the prompt token plus the top k, or every token when
  prompt_logprobs == -1). A prompt_logprobs above the engine's max_logprobs is a ValueError, as in vLLM.

What it was given: `module.llms` (every LLM built, each with `.kwargs` and `.generate_calls`, a list of
(prompts, params list)) and `module.sampling_params` (every SamplingParams, each with `.kwargs`).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pytest

# Keyword arguments of vllm.LLM / EngineArgs that leakaudit may pass (a subset of vLLM's; anything else is refused).
ENGINE_ARGS = frozenset({
    "model", "tokenizer", "tokenizer_mode", "trust_remote_code", "dtype", "seed", "gpu_memory_utilization",
    "max_model_len", "enable_prefix_caching", "max_logprobs", "load_format", "tensor_parallel_size",
    "quantization", "enforce_eager", "swap_space", "max_num_seqs", "revision", "download_dir", "disable_log_stats",
})


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class FullVocabLogprobs(Mapping):
    """One position's log-probs over the whole vocabulary (prompt_logprobs=-1), built lazily from an array."""

    def __init__(self, row: Any):
        self._row = row  # numpy float32 [V]

    def __getitem__(self, token_id: int) -> Logprob:
        if not 0 <= int(token_id) < len(self._row):
            raise KeyError(token_id)
        return Logprob(float(self._row[int(token_id)]))

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self._row)))

    def __len__(self) -> int:
        return len(self._row)


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    finish_reason: str = "length"
    text: str = ""


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    prompt_logprobs: list[Any] | None = None
    finished: bool = True


class SamplingParams:
    _records: list = []  # replaced per module by make_module

    def __init__(self, *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 max_tokens: int | None = 16, seed: int | None = None, stop_token_ids: Sequence[int] | None = None,
                 prompt_logprobs: int | None = None, logprobs: int | None = None, detokenize: bool = True,
                 ignore_eos: bool = False):
        self.kwargs = dict(n=n, temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, seed=seed,
                           stop_token_ids=stop_token_ids, prompt_logprobs=prompt_logprobs, logprobs=logprobs,
                           detokenize=detokenize, ignore_eos=ignore_eos)
        for k, v in self.kwargs.items():
            setattr(self, k, v)
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if seed is not None and not 0 <= seed < 2**63:
            raise ValueError(f"seed out of range: {seed}")
        if prompt_logprobs is not None and prompt_logprobs < -1:
            raise ValueError(f"prompt_logprobs must be -1 or >= 0, got {prompt_logprobs}")
        type(self)._records.append(self)

    def __repr__(self) -> str:
        return f"SamplingParams({self.kwargs})"


class LLM:
    _records: list = []  # replaced per module by make_module

    def __init__(self, model: str, **kwargs: Any):
        unknown = sorted(set(kwargs) - ENGINE_ARGS)
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument '{unknown[0]}'")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = model
        self.kwargs = {"model": model, **kwargs}
        self.max_logprobs = kwargs.get("max_logprobs", 20)
        self.generate_calls: list[tuple[list[Any], list[SamplingParams]]] = []
        self._tok = AutoTokenizer.from_pretrained(model, trust_remote_code=kwargs.get("trust_remote_code", False))
        self._model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, use_safetensors=True,
                                                           trust_remote_code=kwargs.get("trust_remote_code", False))
        self._model.eval()
        type(self)._records.append(self)

    def get_tokenizer(self) -> Any:
        return self._tok

    # ------------------------------------------------------------------ generate
    def generate(self, prompts: Sequence[Any], sampling_params: Any = None, use_tqdm: bool = True,
                 **_: Any) -> list[RequestOutput]:
        prompts = list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = list(sampling_params) if isinstance(sampling_params, (list, tuple)) else [sampling_params] * len(
            prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        self.generate_calls.append((prompts, params))
        outputs = []
        for r, (prompt, p) in enumerate(zip(prompts, params)):
            if not isinstance(prompt, dict) or "prompt_token_ids" not in prompt:
                raise TypeError(f"fake vllm takes {{'prompt_token_ids': [...]}} prompts, got {type(prompt).__name__}")
            ids = [int(t) for t in prompt["prompt_token_ids"]]
            k = p.prompt_logprobs
            if k is not None and self.max_logprobs != -1 and (k == -1 or k > self.max_logprobs):
                raise ValueError(f"Requested prompt logprobs of {k}, which is greater than max allowed: "
                                 f"{self.max_logprobs}")
            plp = self._prompt_logprobs(ids, k) if k is not None else None
            outs = [self._sample(ids, p, j) for j in range(p.n)]
            outputs.append(RequestOutput(str(r), ids, outs, plp))
        return outputs

    def _logprobs(self, ids: list[int]) -> Any:
        import torch

        with torch.inference_mode():
            logits = self._model(input_ids=torch.tensor([ids])).logits[0].float()
        return torch.log_softmax(logits, dim=-1)  # [L, V]

    def _prompt_logprobs(self, ids: list[int], k: int) -> list[Any]:
        lp = self._logprobs(ids).numpy()
        out: list[Any] = [None]
        for pos in range(1, len(ids)):
            row = lp[pos - 1]
            if k == -1:
                out.append(FullVocabLogprobs(row))
                continue
            entry = {}
            if k > 0:
                for rank, tok in enumerate(row.argsort()[::-1][:k], start=1):
                    entry[int(tok)] = Logprob(float(row[tok]), rank)
            tok = ids[pos]
            if tok not in entry:
                entry[tok] = Logprob(float(row[tok]), int((row > row[tok]).sum()) + 1)
            out.append(entry)
        return out

    def _sample(self, ids: list[int], p: SamplingParams, j: int) -> CompletionOutput:
        import torch

        gen = torch.Generator().manual_seed(((p.seed or 0) * 1_000_003 + j) % (2**63))
        seq, new = list(ids), []
        stop = set(p.stop_token_ids or [])
        reason = "length"
        for _ in range(p.max_tokens or 16):
            logits = self._logprobs(seq)[-1]
            if p.temperature == 0:
                tok = int(logits.argmax())
            else:
                probs = torch.softmax(logits / p.temperature, dim=-1)
                if p.top_p < 1.0:
                    sorted_p, order = probs.sort(descending=True)
                    keep = sorted_p.cumsum(0) - sorted_p < p.top_p
                    probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
                    probs = probs / probs.sum()
                tok = int(torch.multinomial(probs, 1, generator=gen))
            new.append(tok)
            seq.append(tok)
            if tok in stop and not p.ignore_eos:
                reason = "stop"
                break
        return CompletionOutput(j, new, reason)


def make_module() -> types.ModuleType:
    """A fresh `vllm` module (its own records of what it was given)."""
    module = types.ModuleType("vllm")
    module.__version__ = "0.0.0+fake"
    module.__file__ = __file__
    llms: list = []
    params: list = []
    module.LLM = type("LLM", (LLM,), {"_records": llms, "__module__": "vllm"})
    module.SamplingParams = type("SamplingParams", (SamplingParams,), {"_records": params, "__module__": "vllm"})
    module.RequestOutput = RequestOutput
    module.CompletionOutput = CompletionOutput
    module.Logprob = Logprob
    module.llms = llms
    module.sampling_params = params
    return module


def install_fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Put a fresh fake `vllm` into sys.modules for the rest of the test (monkeypatch undoes it)."""
    module = make_module()
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The fake `vllm` module, installed for this test (see the module docstring)."""
    return install_fake_vllm(monkeypatch)
