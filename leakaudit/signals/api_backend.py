"""A signals backend for a student reachable only over an OpenAI-compatible completions API (vLLM's schema).

What the API is used for. Leaky and the same-trajectory attacks need from the target only (a) fresh
trajectories it samples and (b) its log-probs of those very tokens, which the completions endpoint returns with
`logprobs` as it samples. So `sample` keeps both: the ids go to the trajectory store as any backend's would, and
`score` later answers the target's teacher-forced log-probs of its own trajectories from what the server
returned (no local forward of the target, which is not here). Fixed texts (LOSS, zlib, Min-K%, ratios, LiRA,
RMIA) need the target's log-probs of a *given* text: `score` asks the server for them only when the
capabilities probe found `prompt_logprobs` (vLLM) or `echo` log-probs that pass an alignment check; otherwise
it refuses and the study leaves the target's fixed texts unscored (those attacks are skipped, and said so).
Min-K%++ needs the mean and std of log p over the whole vocabulary at each position, which no completions API
returns: mu / sigma are always None here.

Sampling. temperature, top_p from the SamplingConfig (a study refuses others than 1 and 1 for an API target,
since servers differ in whether returned log-probs are before or after those transforms; at 1/1 they agree),
top_k -1, min_p 0, repetition/presence/frequency penalties off, EOS kept (the server stops there). Token-id
prompts (the stored student prompt ids; vLLM takes a list of ints as `prompt`).
- When the probe finds `n` and `seed` honoured: one request per prompt with n = n_per_record and seed =
  cfg.seed. (leakaudit's test server then draws choice j with sampler.row_seed(seed, prompt, j), exactly as
  HFBackend does, so the same seed gives the local backend's tokens; vLLM derives child seeds its own way.)
- Else n_per_record requests per prompt, n = 1, seed = row_seed(cfg.seed, prompt, j) (distinct per trajectory).
Token ids come from vLLM's `return_tokens_as_token_ids` ('token_id:N') when honoured, else from the token
strings through the base tokenizer with a re-encode check (api_protocol.TokenMapper). A record with any
trajectory whose ids cannot be recovered exactly is excluded: `sample` returns no trajectories for it and
`excluded` says why; nothing is ever aligned by guesswork.

Durability. Every answered request is parsed and appended to the journal (api_journal.Journal) as it arrives;
`sample` and `score` look a request up there before sending it, so a rerun after a crash or kill -9 sends only
the requests that had no answer. The probe's findings are written once to `capabilities.json` and reused on
resume, so a rerun builds the same request bodies (the same hashes) as the run it resumes.

Shapes: P prompts, n trajectories per prompt, T tokens. Log-probs are float32 nats (natural log), <= 0.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from leakaudit.audit_options import flag_for
from leakaudit.errors import ConfigError, InputError
from leakaudit.io import read_json, write_json
from leakaudit.signals.api_client import ApiClient, ApiError
from leakaudit.signals.api_journal import Journal
from leakaudit.signals.api_protocol import (ResponseError, TokenMapper, UnrecoverableTokens, choices,
                                            parse_completion, parse_echo_logprobs, parse_prompt_logprobs,
                                            parse_token_id_strings, request_hash, sample_body, score_body)
from leakaudit.signals.types import SamplingConfig, TokenScores, check_score_inputs
from leakaudit.signals.sampler import row_seed

JOURNAL = "api_journal.jsonl"
CAPABILITIES = "capabilities.json"
PROBE_TEXT = "The capital of France is"
FIXED_MODES = ("prompt_logprobs", "echo")
ALIGN_TOL = 1e-3
"""Largest |difference| (nats) allowed between a sampled token's returned log-prob and the same token's
log-prob re-read as a prompt log-prob, for the probe to trust the server's fixed-text log-probs."""


@dataclass(frozen=True)
class ApiOptions:
    """How to reach and pace the server (the audit section's api_* settings)."""

    model: str
    """The served model's name (`model` of every request; /v1/models lists the ones served)."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """Environment variable holding the API key; None = send no key. Its value is never logged or written."""
    concurrency: int = 4
    """Requests in flight at once (>= 1)."""
    timeout_s: float = 60.0
    """Seconds one attempt may take before it is abandoned and retried (> 0)."""
    max_retries: int = 4
    """Retries of a request on 429 / 5xx / timeouts / connection errors / non-JSON bodies (>= 0)."""
    backoff_s: float = 0.5
    """Base of the exponential backoff (seconds; full jitter)."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError(f"{flag_for('audit.target_model')}: the served model's name is required for an API "
                              "target")


def api_client(base_url: str, opts: ApiOptions) -> ApiClient:
    return ApiClient(base_url, api_key_env=opts.api_key_env, concurrency=opts.concurrency,
                     timeout_s=opts.timeout_s, max_retries=opts.max_retries, backoff_s=opts.backoff_s)


class ApiBackend:
    """Backend over an OpenAI-compatible completions server; see the module docstring.

    base_url: 'http://HOST:PORT/v1'. tokenizer: the base model's (the target's) tokenizer, for the probe prompt
    and for mapping token strings when the server returns no ids. state_dir: where the journal and
    capabilities.json live (a study passes the target's fresh-signals directory)."""

    def __init__(self, base_url: str, tokenizer: Any, opts: ApiOptions, state_dir: str | os.PathLike, *,
                 client: ApiClient | None = None):
        self.opts = opts
        self.model_ref = base_url
        self.client = client or api_client(base_url, opts)
        self.tokenizer = tokenizer
        self.mapper = TokenMapper(tokenizer)
        self.state_dir = Path(state_dir)
        self.journal = Journal(self.state_dir / JOURNAL)
        self.excluded: dict[str, str] = {}
        """key (record id, or the prompt's index) -> why its trajectories were excluded (last `sample` call)."""
        self.sent = {"sample": 0, "score": 0}
        """Requests this object sent (answered ones; journal hits are not counted)."""
        self._sent_lock = threading.Lock()
        self._sampled: dict[tuple[tuple[int, ...], tuple[int, ...]], list[float]] = {}
        self._index_journal()
        self.capabilities = self._capabilities()

    # ---- probe ----------------------------------------------------------------------------------------------
    def _capabilities(self) -> dict[str, Any]:
        path = self.state_dir / CAPABILITIES
        if path.is_file():
            return read_json(path)
        caps = self.probe()
        write_json(path, caps)
        return caps

    def probe(self) -> dict[str, Any]:
        """Ask the server what it honours (a few short requests, not journaled):
        served_models (GET /models, [] when absent), n, seed (the same seeded request twice gives the same
        tokens), token_ids (return_tokens_as_token_ids), fixed_text_mode ('prompt_logprobs', 'echo' or None: the
        first whose log-probs of a sampled completion re-read as a prompt agree with the sampled ones within
        ALIGN_TOL), and notes saying why each missing capability was judged missing."""
        notes: list[str] = []
        served: list[str] = []
        try:
            listed = self.client.get("/models")
        except ApiError as e:
            notes.append(f"GET /models failed ({e}); model name not checked")
        else:
            data = listed.get("data") if isinstance(listed, dict) else None
            served = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        if served and self.opts.model not in served:
            raise ConfigError(f"{flag_for('audit.target_model')} {self.opts.model!r}: the server serves {served}")
        prompt = list(self.tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
        body = sample_body(self.opts.model, prompt, n=2, seed=1234, max_tokens=4)
        first = self.client.post("/completions", body)
        second = self.client.post("/completions", body)
        c1, c2 = choices(first), choices(second)
        n_ok = len(c1) == 2
        if not n_ok:
            notes.append(f"n=2 answered with {len(c1)} choice(s): one request per trajectory")
        tokens1 = [(c.get("logprobs") or {}).get("tokens") for c in c1]
        tokens2 = [(c.get("logprobs") or {}).get("tokens") for c in c2]
        seed_ok = tokens1 == tokens2
        if not seed_ok:
            notes.append("the same seeded request gave other tokens: seed not honoured, samples not reproducible "
                         "(a rerun still resumes from the journal)")
        ids_ok = all(isinstance(t, list) and parse_token_id_strings(t) is not None for t in tokens1)
        if not ids_ok:
            notes.append("return_tokens_as_token_ids not honoured: token strings mapped to ids with the base "
                         "tokenizer and checked by re-encoding")
        mode = None
        try:
            sampled = parse_completion(c1[0], self.mapper)
        except (ResponseError, UnrecoverableTokens) as e:
            notes.append(f"probe completion unusable for the fixed-text check ({e})")
            sampled = None
        if sampled is not None and sampled.ids:
            for m in FIXED_MODES:
                got = self._fixed_logprobs(prompt + sampled.ids, m, journal=False, note=notes)
                if got is None:
                    continue
                diff = float(np.max(np.abs(np.asarray(got[-len(sampled.ids):]) - np.asarray(sampled.logprobs))))
                if diff <= ALIGN_TOL:
                    mode = m
                    break
                notes.append(f"{m}: log-probs of the sampled tokens differ from the sampled ones by up to "
                             f"{diff:.3g} nats (misaligned or after temperature): not used")
        if mode is None:
            notes.append("no usable prompt log-probs (prompt_logprobs or echo): fixed-text attacks cannot run")
        return {"base_url": self.client.base_url, "model": self.opts.model, "served_models": served, "n": n_ok,
                "seed": seed_ok, "token_ids": ids_ok, "fixed_text_mode": mode, "vocab_stats": False,
                "notes": notes}

    # ---- journal --------------------------------------------------------------------------------------------
    def _index_journal(self) -> None:
        for entry in self.journal.entries():
            if entry.get("kind") == "sample":
                self._remember(entry["response"])

    def _remember(self, response: dict[str, Any]) -> None:
        prompt = tuple(response.get("prompt", ()))
        for c in response.get("choices", []):
            if "ids" in c:
                self._sampled[(prompt, tuple(c["ids"]))] = c["logprobs"]

    def _count(self, kind: str) -> None:
        with self._sent_lock:
            self.sent[kind] += 1

    # ---- sample ---------------------------------------------------------------------------------------------
    def _sample_requests(self, prompt: list[int], cfg: SamplingConfig) -> list[dict[str, Any]]:
        token_ids = bool(self.capabilities.get("token_ids"))
        if self.capabilities.get("n") and self.capabilities.get("seed"):
            return [sample_body(self.opts.model, prompt, n=cfg.n_per_record, seed=cfg.seed,
                                max_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                                token_ids=token_ids)]
        return [sample_body(self.opts.model, prompt, n=1, seed=row_seed(cfg.seed, prompt, j),
                            max_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                            token_ids=token_ids) for j in range(cfg.n_per_record)]

    def _answer_sample(self, key: str, prompt: list[int], body: dict[str, Any]) -> dict[str, Any]:
        h = request_hash(body)
        hit = self.journal.get(h)
        if hit is not None:
            return hit["response"]
        data = self.client.post("/completions", body)
        self._count("sample")
        try:
            got = choices(data)
            if len(got) != body["n"]:
                raise ResponseError(f"asked for n={body['n']} completions, got {len(got)}")
        except ResponseError as e:
            raise ApiError(f"{self.client.base_url}/completions: {e}") from None
        parsed = []
        for c in got:
            try:
                comp = parse_completion(c, self.mapper)
                if len(comp.ids) > body["max_tokens"]:
                    raise ResponseError(f"{len(comp.ids)} tokens for max_tokens={body['max_tokens']}")
                parsed.append({"ids": comp.ids, "logprobs": comp.logprobs, "finish_reason": comp.finish_reason})
            except UnrecoverableTokens as e:
                parsed.append({"excluded": f"token ids not recoverable: {e}"})
            except ResponseError as e:
                raise ApiError(f"{self.client.base_url}/completions: {e}") from None
        response = {"prompt": prompt, "choices": parsed}
        self.journal.append(h, key, "sample", response)
        self._remember(response)
        return self.journal.get(h)["response"]

    def sample(self, prompts: list[list[int]], cfg: SamplingConfig, *,
               keys: Sequence[str] | None = None) -> list[list[list[int]]]:
        """[P][n] completion ids (EOS kept when generated). A prompt with any unrecoverable trajectory gets []
        and an entry in `excluded` (keyed by keys[i], or str(i))."""
        if cfg.seed is None:
            raise ConfigError("SamplingConfig.seed is None: pass an int seed")
        keys = [str(k) for k in keys] if keys is not None else [str(i) for i in range(len(prompts))]
        work = [(i, j, body) for i, p in enumerate(prompts)
                for j, body in enumerate(self._sample_requests(list(map(int, p)), cfg))]
        answers: dict[tuple[int, int], dict[str, Any]] = {}

        def one(item):
            i, j, body = item
            return i, j, self._answer_sample(keys[i], list(map(int, prompts[i])), body)

        for i, j, resp in self.client.map(one, work):
            answers[(i, j)] = resp
        self.excluded = {}
        out: list[list[list[int]]] = []
        for i in range(len(prompts)):
            rows = [c for j in range(len(self._sample_requests(list(map(int, prompts[i])), cfg)))
                    for c in answers[(i, j)]["choices"]]
            bad = [c["excluded"] for c in rows if "excluded" in c]
            if bad:
                self.excluded[keys[i]] = bad[0]
                out.append([])
            else:
                out.append([list(c["ids"]) for c in rows])
        return out

    # ---- score ----------------------------------------------------------------------------------------------
    @property
    def fixed_text_mode(self) -> str | None:
        mode = self.capabilities.get("fixed_text_mode")
        return mode if mode in FIXED_MODES else None

    @property
    def scores_fixed_texts(self) -> bool:
        """Whether `score` can give log-probs of texts the target did not sample (prompt log-probs found)."""
        return self.fixed_text_mode is not None

    def _fixed_logprobs(self, ids: list[int], mode: str, *, journal: bool = True,
                        note: list[str] | None = None) -> list[float] | None:
        """log p(ids[t] | ids[:t]) for t >= 1 through `mode`; None (with a note) when the server refuses it
        during the probe."""
        body = score_body(self.opts.model, ids, mode=mode)
        h = request_hash(body)
        if journal and (hit := self.journal.get(h)) is not None:
            return hit["response"]["logprobs"]
        try:
            data = self.client.post("/completions", body)
            c = choices(data)[0]
            values = parse_prompt_logprobs(c, ids) if mode == "prompt_logprobs" else parse_echo_logprobs(c, ids)
        except (ApiError, ResponseError) as e:
            if note is None:
                raise ApiError(f"{self.client.base_url}/completions ({mode}): {e}") from None
            note.append(f"{mode}: {e}")
            return None
        if journal:
            self._count("score")
            self.journal.append(h, "score", "score", {"logprobs": values})
        return values

    def score(self, prefixes: list[list[int]], continuations: list[list[int]], *,
              vocab_stats: bool = False) -> list[TokenScores]:
        """One TokenScores (logp only: mu/sigma are None, an API gives no vocabulary statistics) per pair.
        A (prefix, continuation) this backend sampled is answered from the log-probs the server returned when
        sampling it; any other needs the probe's fixed-text mode (InputError without one)."""
        check_score_inputs(prefixes, continuations)
        out: list[TokenScores | None] = [None] * len(prefixes)
        todo = []
        for i, (p, c) in enumerate(zip(prefixes, continuations)):
            hit = self._sampled.get((tuple(map(int, p)), tuple(map(int, c))))
            if hit is not None:
                out[i] = TokenScores(np.asarray(hit, dtype=np.float32))
            elif not c:
                out[i] = TokenScores(np.zeros(0, dtype=np.float32))
            else:
                todo.append(i)
        if todo and self.fixed_text_mode is None:
            raise InputError(f"the API target {self.client.base_url} returns no prompt log-probs (prompt_logprobs "
                             "or echo), so it cannot score a text it did not sample")

        def one(i):
            ids = list(map(int, prefixes[i])) + list(map(int, continuations[i]))
            values = self._fixed_logprobs(ids, self.fixed_text_mode)
            return i, values[len(prefixes[i]) - 1:]

        for i, values in self.client.map(one, todo):
            out[i] = TokenScores(np.asarray(values, dtype=np.float32))
        return out  # type: ignore[return-value]

    def report(self) -> dict[str, Any]:
        """What the run records about the API (api.json): capabilities, request counts, retries."""
        return {"capabilities": self.capabilities, "options": {k: v for k, v in asdict(self.opts).items()},
                "sent": dict(self.sent), "client": self.client.stats.to_dict(), "journal_entries": len(self.journal)}

    def close(self) -> None:
        pass
