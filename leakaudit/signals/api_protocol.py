"""Request bodies and response parsing for an OpenAI-compatible `/v1/completions` endpoint (vLLM's schema).

Pure functions, no network: leakaudit.signals.api_client sends what these build, leakaudit.signals.api_backend
turns what they parse into trajectories and log-probs. Every log-prob is in nats (natural log), as vLLM returns
them: log p(token | context) under the served model, <= 0.

Field names are vLLM's, checked against vllm/entrypoints/openai/protocol.py (vllm-project/vllm, the
CompletionRequest / CompletionResponse / CompletionLogProbs / CompletionResponseChoice classes):
- request: `prompt` may be a list of token ids (`Union[list[int], list[list[int]], str, list[str]]`), `n`,
  `seed`, `temperature`, `top_p`, `top_k`, `min_p`, `repetition_penalty`, `max_tokens`, `logprobs` (int: how many
  top alternatives beside the chosen token), `echo`, `prompt_logprobs` (int), `return_tokens_as_token_ids`,
  `skip_special_tokens`, `add_special_tokens`.
- response: `choices[i].index`, `.text`, `.finish_reason`, `.logprobs` = CompletionLogProbs {`tokens` [T] str,
  `token_logprobs` [T] float|None, `top_logprobs` [T] {token str: logprob}|None, `text_offset` [T] int}, and
  vLLM's own `.prompt_logprobs`: list[None | {token id (a JSON string key): Logprob {logprob, rank,
  decoded_token}}], one entry per prompt token, the first None (nothing predicts it).
- with `return_tokens_as_token_ids`, vLLM renders each token as the string f"token_id:{token_id}"
  (vllm/entrypoints/openai/serving_engine.py, `_get_decoded_token`); without it, as the decoded text of that one
  token, which is lossy (bytes of a multi-byte character decode to U+FFFD), hence `recover_ids`.

Sampling parameters are sent explicitly, never left to the server: vLLM fills unset ones from the model's
generation_config.json (`default_sampling_params`), which often sets top_k or a repetition penalty. top_k = -1
means "no top-k" for every vLLM version (newer ones also accept 0); min_p 0 and repetition_penalty 1 are no-ops.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

TOKEN_ID_PREFIX = "token_id:"


class ResponseError(ValueError):
    """A response that does not have the shape vLLM's schema gives (a server bug or a truncated body)."""


class UnrecoverableTokens(ValueError):
    """A completion whose token ids cannot be recovered exactly from what the server returned."""


@dataclass(frozen=True)
class Completion:
    """One parsed choice: token ids [T] int and their log-probs [T] float (nats), finish_reason as sent."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None


def request_hash(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a request body (sorted keys, no spaces): the journal key of a request.
    Bodies never hold the API key (it travels in a header), so the hash and the journal cannot leak it."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def sample_body(model: str, prompt: Sequence[int], *, n: int, seed: int | None, max_tokens: int,
                temperature: float = 1.0, top_p: float = 1.0, token_ids: bool = True) -> dict[str, Any]:
    """A completions request that samples `n` completions of the token-id prompt `prompt` and returns each
    sampled token's log-prob (`logprobs: 1`: the chosen token plus the top one; 0 is read as "off" by some
    OpenAI-compatible servers). `add_special_tokens: false`: the prompt ids are final, the server adds no BOS."""
    body: dict[str, Any] = {
        "model": model, "prompt": [int(t) for t in prompt], "n": int(n), "max_tokens": int(max_tokens),
        "temperature": float(temperature), "top_p": float(top_p), "top_k": -1, "min_p": 0.0,
        "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
        "logprobs": 1, "echo": False, "stream": False, "skip_special_tokens": False, "add_special_tokens": False,
    }
    if seed is not None:
        body["seed"] = int(seed)
    if token_ids:
        body["return_tokens_as_token_ids"] = True
    return body


def score_body(model: str, ids: Sequence[int], *, mode: str) -> dict[str, Any]:
    """A request for the log-probs of the given token ids `ids` (prefix + continuation) under the model.
    mode 'prompt_logprobs': vLLM's `prompt_logprobs: 0` (only each prompt token's own log-prob) with one
    generated token (`max_tokens: 1`, ignored); mode 'echo': `echo: true, max_tokens: 0, logprobs: 1` (the
    OpenAI legacy way: the prompt's tokens come back first in `logprobs`)."""
    base: dict[str, Any] = {"model": model, "prompt": [int(t) for t in ids], "temperature": 1.0, "top_p": 1.0,
                            "top_k": -1, "n": 1, "stream": False, "add_special_tokens": False,
                            "skip_special_tokens": False, "return_tokens_as_token_ids": True}
    if mode == "prompt_logprobs":
        return {**base, "max_tokens": 1, "prompt_logprobs": 0}
    if mode == "echo":
        return {**base, "max_tokens": 0, "echo": True, "logprobs": 1}
    raise ValueError(f"unknown scoring mode {mode!r}; expected 'prompt_logprobs' or 'echo'")


def choices(response: Any) -> list[dict[str, Any]]:
    """The choices of a completions response ordered by `index`; ResponseError unless it has vLLM's shape."""
    if not isinstance(response, dict) or not isinstance(response.get("choices"), list) or not response["choices"]:
        raise ResponseError("response has no 'choices' list")
    out = response["choices"]
    if not all(isinstance(c, dict) for c in out):
        raise ResponseError("a choice is not a JSON object")
    return sorted(out, key=lambda c: int(c.get("index", 0)))


def _finite_logprob(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value > 1e-6:
        raise ResponseError(f"{where}: log-prob {value!r} is not a finite number <= 0")
    return float(value)


def completion_logprobs(choice: dict[str, Any]) -> tuple[list[str], list[float]]:
    """(tokens [T] str, token_logprobs [T] float) of one sampled choice; ResponseError when absent or ragged."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        raise ResponseError("choice has no 'logprobs' object (did the server honour logprobs?)")
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
        raise ResponseError("logprobs.tokens and logprobs.token_logprobs are missing or of different lengths")
    if not all(isinstance(t, str) for t in tokens):
        raise ResponseError("logprobs.tokens holds a non-string")
    return tokens, [_finite_logprob(v, f"logprobs.token_logprobs[{i}]") for i, v in enumerate(values)]


def parse_token_id_strings(tokens: Sequence[str]) -> list[int] | None:
    """Ids from vLLM's 'token_id:N' strings; None when any token is not of that form (the server ignored
    return_tokens_as_token_ids)."""
    out = []
    for t in tokens:
        if not t.startswith(TOKEN_ID_PREFIX) or not t[len(TOKEN_ID_PREFIX):].isdigit():
            return None
        out.append(int(t[len(TOKEN_ID_PREFIX):]))
    return out


class TokenMapper:
    """Maps the token strings of a server that does not return ids back to ids with the base tokenizer.

    A string holding U+FFFD is refused at once (its bytes are gone; the vocabulary's own U+FFFD token would pass
    every check while being the wrong id). Then two ways, each verified, else UnrecoverableTokens (the caller
    excludes the record, never guesses):
    1. re-encode the joined text; accepted when it gives exactly one id per returned token and each id decodes
       to that token's string (the server tokenized canonically);
    2. else per token: the ids whose one-token decode equals the string; accepted when every string names
       exactly one id (built lazily from a decode of the whole vocabulary, once).
    Token strings are the one-token decodes vLLM returns (`tokenizer.decode(token_id)`)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._by_string: dict[str, list[int]] | None = None

    def _decode1(self, i: int) -> str:
        return self.tokenizer.decode([int(i)])

    def _reverse(self) -> dict[str, list[int]]:
        if self._by_string is None:
            rev: dict[str, list[int]] = {}
            for i in range(len(self.tokenizer)):
                rev.setdefault(self._decode1(i), []).append(i)
            self._by_string = rev
        return self._by_string

    def recover(self, tokens: Sequence[str]) -> list[int]:
        if not tokens:
            return []
        for pos, t in enumerate(tokens):
            # U+FFFD is what a piece of a multi-byte character decodes to (byte-fallback / byte-level BPE), and
            # also a character of its own that some vocabularies hold: a string with it names no token for sure
            if "\ufffd" in t:
                raise UnrecoverableTokens(f"token {pos} ({t!r}) holds U+FFFD: part of a multi-byte character, "
                                          "its bytes are lost")
        joined = self.tokenizer("".join(tokens), add_special_tokens=False)["input_ids"]
        if len(joined) == len(tokens) and all(self._decode1(i) == t for i, t in zip(joined, tokens)):
            return [int(i) for i in joined]
        rev = self._reverse()
        out = []
        for pos, t in enumerate(tokens):
            hits = rev.get(t, [])
            if len(hits) != 1:
                what = "no token" if not hits else f"{len(hits)} tokens"
                raise UnrecoverableTokens(f"token {pos} ({t!r}) decodes from {what} of the base tokenizer")
            out.append(hits[0])
        return out


def parse_completion(choice: dict[str, Any], mapper: TokenMapper | None) -> Completion:
    """One sampled choice -> Completion. Ids from 'token_id:N' strings when the server sent them, else through
    `mapper` (UnrecoverableTokens when that fails, or when there is no mapper)."""
    tokens, values = completion_logprobs(choice)
    ids = parse_token_id_strings(tokens)
    if ids is None:
        if mapper is None:
            raise UnrecoverableTokens("the server returned token strings, not 'token_id:N', and no tokenizer maps them")
        ids = mapper.recover(tokens)
    return Completion(ids=ids, logprobs=values, finish_reason=choice.get("finish_reason"))


def parse_prompt_logprobs(choice: dict[str, Any], ids: Sequence[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t = 1..len(ids)-1 from vLLM's `prompt_logprobs` (entry t is a dict keyed by
    token id, as a JSON string, or 'token_id:N'; value a Logprob object or a bare number). [len(ids) - 1]."""
    plp = choice.get("prompt_logprobs")
    if not isinstance(plp, list) or len(plp) != len(ids):
        raise ResponseError(f"prompt_logprobs has {len(plp) if isinstance(plp, list) else 'no'} entries for a "
                            f"prompt of {len(ids)} tokens")
    out = []
    for t in range(1, len(ids)):
        entry = plp[t]
        if not isinstance(entry, dict):
            raise ResponseError(f"prompt_logprobs[{t}] is not an object")
        tok = int(ids[t])
        value = next((entry[k] for k in (str(tok), f"{TOKEN_ID_PREFIX}{tok}") if k in entry), None)
        if value is None:
            raise ResponseError(f"prompt_logprobs[{t}] has no entry for the prompt's token {tok}")
        value = value.get("logprob") if isinstance(value, dict) else value
        out.append(_finite_logprob(value, f"prompt_logprobs[{t}]"))
    return out


def parse_echo_logprobs(choice: dict[str, Any], ids: Sequence[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t = 1..len(ids)-1 from an echo response (`echo: true, max_tokens: 0`): the
    first len(ids) entries of logprobs are the prompt's, the first of them None. The returned tokens must be
    the prompt's ids (sent with return_tokens_as_token_ids), so a server that shifts its echo log-probs by a
    position (llama-cpp-python#1983) or drops one is refused rather than misaligned."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("tokens"), list):
        raise ResponseError("echo response has no logprobs.tokens")
    tokens, values = lp["tokens"], lp.get("token_logprobs")
    if not isinstance(values, list) or len(tokens) < len(ids) or len(values) < len(ids):
        raise ResponseError("echo response holds fewer tokens than the prompt")
    got = parse_token_id_strings(tokens[:len(ids)])
    if got != [int(i) for i in ids]:
        raise ResponseError("echo response's tokens are not the prompt's token ids")
    return [_finite_logprob(values[t], f"echo token_logprobs[{t}]") for t in range(1, len(ids))]
