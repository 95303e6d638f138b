"""transformers backend: batched, left-padded scoring and per-row seeded sampling (CPU or GPU).

Scoring sorts sequences by length, packs them into batches bounded by `score_batch_size` sequences and
`max_batch_tokens` padded tokens, runs the decoder body (optionally under bf16 autocast), and sends only the
positions that predict a continuation token through the output head, in float32 (see logprobs.py).

With `share_prefix`, continuations that share a prefix (the n fresh trajectories of a record share its prompt)
are scored from that prefix's KV cache: per batch, the distinct prefixes run once (left-padded, use_cache), the
cache rows are gathered to one per continuation, and the continuations minus their last token run on top of it
(right-padded); the hidden state at each prefix's last position predicts the first continuation token.
Prefixes that occur once take the plain path. In fp32 the scores equal the plain path's up to float noise
(tests/test_prefix_scoring.py: atol 1e-5 on logp, mu and sigma).

Sampling draws every row with a `SeededSampler` (sampler.py): trajectory j of a prompt depends only on
(cfg.seed, prompt ids, j), not on batch size or order, up to float noise (a flip needs the row's uniform draw
within ~1e-6 of a CDF boundary). The decode runs leakaudit.signals.decode's loop (`sample_decoder='loop'`, the
default), which calls the sampler's draw directly, or `model.generate` with the sampler as a logits processor
(`sample_decoder='generate'`, the path before it): the same tokens (tests/test_decode.py), the loop without
generate's CPU copy of the head weight per row at the prefill (decode.py's docstring). With `sample_bf16` (the
default on bf16-native hardware) sampling runs on a bf16 copy of the weights, made once per backend; its logits
move more with batch shape, so the guarantee there is: same seed, inputs and batch_size -> same tokens. Scoring
always uses the float32 model.
With `share_prefill`, the loop starts from one prefill per distinct prompt of a batch, its KV cache rows gathered
to one per trajectory (same SeededSampler, same contract; in fp32 the same tokens as without it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from leakaudit.errors import ConfigError
from leakaudit.models import bf16_copy
from leakaudit.padding import left_pad, position_ids, right_pad
from leakaudit.precision import bf16_is_native
from leakaudit.signals.types import SamplingConfig, TokenScores, check_score_inputs
from leakaudit.signals.decode import decode
from leakaudit.signals.logprobs import head_logprobs
from leakaudit.signals.sampler import SeededSampler, row_seed, trim_completion


@dataclass(frozen=True)
class HFOptions:
    """Options of the transformers backend."""

    device: str = "auto"
    """torch device string ('cpu', 'cuda', 'cuda:1'), or 'auto' (default): 'cuda' when torch.cuda.is_available(),
    else 'cpu' (see resolve_device)."""
    autocast_bf16: bool = False
    """Score with the decoder body under bf16 autocast (the output head and log-softmax stay float32).
    Off by default: on smollm2-135m (bench/results/signals.json, 1 CPU thread with avx512_bf16) it is 2.2x
    faster than fp32 but moves per-token log-probs by mean 0.016 / max 0.18 nats and Min-K%++'s mu by up to
    0.25, noise of the size of the membership gaps the attacks look for; turn on for quick looks."""
    sample_bf16: bool | None = None
    """Sample from a bf16 copy of the weights (made once per backend, at its first sample() call; scoring keeps
    the float32 model). None (default): on where bf16 matmuls are native (CUDA with bf16; CPUs with
    avx512_bf16/AMX via oneDNN). Costs 2 bytes per parameter on the model's device while the backend lives
    (smollm2-135m: +269 MB next to the 538 MB float32 model, made in 0.5 s; tied embeddings stay tied). On
    smollm2-135m (default preset's shapes, 1 CPU thread with AMX) it samples 1.55x faster than the earlier
    path, bf16 autocast over the float32 weights, which re-casts every weight at every decode step (ABBA
    range 1.53-1.56x, bench/results/signals_stage.json). The samples come from a slightly perturbed model:
    next-token log-probs move from float32's by mean 0.023 nats (autocast: 0.020), KL 9e-4 nats (6e-4). That
    does not bias the attacks because every model scores the samples in float32; see the module docstring for
    what stays reproducible."""
    share_prefill: bool = False
    """Sample the n trajectories of a prompt from one prefill of it: per batch the distinct prompts run once
    (left-padded), their KV cache rows are gathered to one per trajectory, and the decode loop draws each row with
    its SeededSampler (whatever `sample_decoder` says). Trajectory j still depends only on (seed, prompt ids, j) up
    to float noise, as without it (tests/test_prefix_scoring.py); off by default."""
    sample_decoder: str = "loop"
    """'loop' (default): leakaudit.signals.decode's decode loop; 'generate': model.generate with the SeededSampler
    as a logits processor, the earlier path. The same tokens (tests/test_decode.py: float32, equal; smollm2-135m's
    bf16 copy: the same 16 trajectories); the loop's prefill sends the last prompt position to the head by index,
    which on CPU spares torch's copy of the bf16 head weight once per row: sampling at the default preset's shape
    (16 rows, 48 new tokens, bf16 copy, 1 thread) 1.40x, 8.5 -> 6.1 CPU s per batch (bench/results/decode.json,
    "signals")."""
    share_prefix: bool = True
    """Score continuations that share a prefix from one KV cache of that prefix (see the module docstring).
    Same scores as the plain path up to float noise (fp32: max abs diff 2.5e-5 / 2.9e-5 nats on smollm2-135m,
    as large as batched vs one-by-one plain scoring; tests hold it to 1e-5); 1.78x / 1.82x faster on the default
    preset's trajectories (bench/results/signals_prefix.json, signals_stage.json), so on by default. Prefixes
    that occur once take the plain path either way."""
    score_batch_size: int = 16
    """Most sequences per scoring forward (>= 1)."""
    max_batch_tokens: int = 4096
    """Most padded tokens (rows x longest row) per scoring forward (>= 1); a longer single row runs alone."""
    head_chunk: int = 256
    """Positions per output-head chunk: bounds the [chunk, V] float32 logits alive at once (>= 1)."""
    eos_token_ids: tuple[int, ...] | None = None
    """Tokens that end a sampled completion; None reads the model's generation config."""

    def __post_init__(self) -> None:
        for name in ("score_batch_size", "max_batch_tokens", "head_chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if self.sample_decoder not in ("loop", "generate"):
            raise ConfigError(f"sample_decoder must be 'loop' or 'generate', got {self.sample_decoder!r}")
        for name in ("autocast_bf16", "share_prefill", "share_prefix", "sample_bf16"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "sample_bf16" and value is None):
                raise ConfigError(f"{name} must be true or false{' (or None)' if name == 'sample_bf16' else ''}, "
                                  f"got {value!r}")
        if self.eos_token_ids is not None:
            object.__setattr__(self, "eos_token_ids", tuple(int(e) for e in self.eos_token_ids))
            if not self.eos_token_ids:
                raise ConfigError("eos_token_ids must name at least one token (or be None)")


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch.cuda.is_available(), else 'cpu'; any other device string is returned as is."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def length_batches(lengths: Sequence[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches, longest first, each with <= max_rows rows and rows*longest <= max_tokens.

    lengths: [S] sequence lengths. Returns a list of index lists covering range(S) exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) >= max_rows or (len(current) + 1) * longest > max_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def prefix_batches(prefix_lens: Sequence[int], cont_lens: Sequence[int], keys: Sequence[Any], max_rows: int,
                   max_tokens: int) -> list[list[int]]:
    """Batches for prefix-shared scoring: rows ordered by (longest prefix first, prefix key, longest continuation
    first), so the rows of one prefix stay together and a batch spans groups only where they fit. A batch holds
    <= max_rows rows and rows * (longest prefix + longest continuation) <= max_tokens (a row alone may exceed it).

    prefix_lens, cont_lens, keys: [S] (keys: any sortable identity of the prefix, e.g. its id tuple).
    Returns index lists covering range(S) exactly once.
    """
    order = sorted(range(len(prefix_lens)), key=lambda i: (-prefix_lens[i], keys[i], -cont_lens[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest_p = longest_c = 0
    for i in order:
        p, c = max(longest_p, prefix_lens[i]), max(longest_c, cont_lens[i])
        if current and (len(current) >= max_rows or (len(current) + 1) * (p + c) > max_tokens):
            batches.append(current)
            current, p, c = [], prefix_lens[i], cont_lens[i]
        current.append(i)
        longest_p, longest_c = p, c
    if current:
        batches.append(current)
    return batches


class HFBackend:
    """A transformers causal LM behind the Backend protocol.

    model_ref: anything leakaudit.models.load_model accepts; options: fields of HFOptions; trust_remote_code
    reaches the model load (off by default).
    """

    def __init__(self, model_ref: str, *, trust_remote_code: bool = False, **options: Any):
        from leakaudit.models import LoadOptions, load_model

        try:
            opts = HFOptions(**options)
        except TypeError as e:
            raise ConfigError(f"transformers backend: {e}") from e
        model = load_model(model_ref, LoadOptions(dtype="float32", device=resolve_device(opts.device)),
                           trust_remote_code=trust_remote_code)
        self._init(model, opts)
        self.model_ref = model_ref

    @classmethod
    def from_model(cls, model: Any, **options: Any) -> "HFBackend":
        """Wrap an already loaded model (eval mode is set here)."""
        self = cls.__new__(cls)
        opts = HFOptions(**options)
        model.to(resolve_device(opts.device))
        model.eval()
        self._init(model, opts)
        self.model_ref = getattr(model.config, "_name_or_path", "")
        return self

    def _init(self, model: Any, opts: HFOptions) -> None:
        self.model = model
        self.options = opts
        self.device = torch.device(resolve_device(opts.device))
        self.sample_bf16 = (bf16_is_native(self.device) if opts.sample_bf16 is None else opts.sample_bf16)
        self._bf16_model: Any = None  # the bf16 copy sampling runs on, made at the first bf16 sample() call
        gen = getattr(model, "generation_config", None)
        eos = list(opts.eos_token_ids) if opts.eos_token_ids is not None else (
            _as_list(getattr(gen, "eos_token_id", None)) or _as_list(model.config.eos_token_id))
        if not eos:
            raise ConfigError("the model names no EOS token; pass eos_token_ids=")
        self.eos_token_ids = eos
        pad = getattr(gen, "pad_token_id", None)
        if pad is None:
            pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else eos[0]
        self._decoder = model.get_decoder()
        self._head = model.get_output_embeddings()
        self._softcap = getattr(model.config, "final_logit_softcapping", None)
        params = inspect.signature(self._decoder.forward).parameters
        # transformers >= 5 names the KV cache argument `cache`; 4.x names it `past_key_values`
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def _autocast(self, enabled: bool) -> Any:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=enabled)

    def _sampling_model(self) -> tuple[Any, bool]:
        """(the model sampling runs, whether under bf16 autocast): the float32 model when sample_bf16 is off,
        else its bf16 copy (made here once, kept while the backend lives), without autocast. The flag is for
        bench/bench_signals.py, whose AutocastSampling times the earlier path (float32 weights under autocast)."""
        if not self.sample_bf16:
            return self.model, False
        if self._bf16_model is None:
            self._bf16_model = bf16_copy(self.model)
        return self._bf16_model, False

    def close(self) -> None:
        """Drop the bf16 sampling copy (open_backend calls this when its block ends)."""
        self._bf16_model = None

    def _run_decoder(self, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """Decoder body forward -> (last hidden state [B, L, H], the KV cache or None). `cache` in kwargs is the
        KV cache to extend (passed under the name this transformers version uses)."""
        cache = kwargs.pop("cache", None)
        if cache is not None:
            kwargs[self._cache_kw] = cache
        # No separate fp32-head option: under autocast the residual stream and the final RMSNorm already stay fp32
        # and the head runs in fp32 below; a norm-in-fp32 variant scored identically to autocast_bf16 (max diff
        # 0.0, bench/results/signals_bf16_body.json), so it was removed.
        with self._autocast(self.options.autocast_bf16):
            out = self._decoder(**kwargs)
        return out.last_hidden_state, _cache_of(out)

    # ---------------------------------------------------------------- scoring
    def score(self, prefixes: list[list[int]], continuations: list[list[int]], *,
              vocab_stats: bool = False) -> list[TokenScores]:
        """Teacher-forced scores; see Backend.score. Output order follows the inputs."""
        check_score_inputs(prefixes, continuations)
        seqs = [list(p) + list(c) for p, c in zip(prefixes, continuations)]
        out: list[TokenScores | None] = [None] * len(seqs)
        todo = []
        for i, c in enumerate(continuations):
            if len(c) == 0:
                empty = np.zeros(0, dtype=np.float32)
                out[i] = TokenScores(empty, empty if vocab_stats else None, empty if vocab_stats else None)
            else:
                todo.append(i)
        if self.options.share_prefix:
            groups: dict[tuple[int, ...], list[int]] = {}
            for i in todo:
                groups.setdefault(tuple(prefixes[i]), []).append(i)
            shared = [i for rows in groups.values() if len(rows) > 1 for i in rows]
            for batch in prefix_batches([len(prefixes[i]) for i in shared], [len(continuations[i]) for i in shared],
                                        [tuple(prefixes[i]) for i in shared], self.options.score_batch_size,
                                        self.options.max_batch_tokens):
                idx = [shared[b] for b in batch]
                scored = self._score_shared_batch([prefixes[i] for i in idx], [continuations[i] for i in idx],
                                                  vocab_stats)
                for i, s in zip(idx, scored):
                    out[i] = s
            done = set(shared)
            todo = [i for i in todo if i not in done]
        lengths = [len(seqs[i]) for i in todo]
        for batch in length_batches(lengths, self.options.score_batch_size, self.options.max_batch_tokens):
            idx = [todo[b] for b in batch]
            scored = self._score_batch([seqs[i] for i in idx], [len(prefixes[i]) for i in idx], vocab_stats)
            for i, s in zip(idx, scored):
                out[i] = s
        return out  # type: ignore[return-value]

    def _score_batch(self, seqs: list[list[int]], prefix_lens: list[int], vocab_stats: bool) -> list[TokenScores]:
        """seqs: B full sequences (prefix + continuation); prefix_lens: [B]. One forward of [B, L]."""
        ids, mask = left_pad(seqs, self.pad_token_id)
        pos = position_ids(mask)
        width = ids.shape[1]
        rows, cols, sizes = [], [], []
        for r, (s, m) in enumerate(zip(seqs, prefix_lens)):
            start = width - len(s)
            # hidden state at position p predicts token p + 1: continuation tokens start + m .. width - 1
            span = torch.arange(start + m - 1, width - 1)
            rows.append(torch.full_like(span, r))
            cols.append(span)
            sizes.append(len(s) - m)
        rows_t, cols_t = torch.cat(rows), torch.cat(cols)
        with torch.inference_mode():
            hidden, _ = self._run_decoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                          position_ids=pos.to(self.device), use_cache=False)
            sel = hidden[rows_t.to(self.device), cols_t.to(self.device)].float()  # [N, H]
            targets = ids[rows_t, cols_t + 1].to(self.device)
            return self._head_scores(sel, targets, sizes, vocab_stats)

    def _score_shared_batch(self, prefixes: list[list[int]], conts: list[list[int]], vocab_stats: bool
                            ) -> list[TokenScores]:
        """B (prefix, continuation) rows whose prefixes repeat: each distinct prefix runs once, then all
        continuations (without their last token, which predicts nothing) run on its gathered KV cache."""
        distinct: dict[tuple[int, ...], int] = {}
        group = [distinct.setdefault(tuple(p), len(distinct)) for p in prefixes]  # [B] row -> distinct prefix
        uniq = [list(p) for p in distinct]
        p_ids, p_mask = left_pad(uniq, self.pad_token_id)  # [G, P]
        g = torch.tensor(group, dtype=torch.long)
        dev = self.device
        with torch.inference_mode():
            p_hidden, cache = self._run_decoder(input_ids=p_ids.to(dev), attention_mask=p_mask.to(dev),
                                                position_ids=position_ids(p_mask).to(dev), use_cache=True)
            first = p_hidden[g.to(dev), -1]  # [B, H]: each row's last prefix position predicts its token 0
            inputs = [c[:-1] for c in conts]
            width = max(len(c) for c in inputs)
            if width:
                c_ids, c_mask = right_pad(inputs, self.pad_token_id)  # [B, W]
                cache.batch_select_indices(g.to(dev))
                plen = torch.tensor([len(p) for p in prefixes], dtype=torch.long)
                pos = plen.unsqueeze(1) + torch.arange(width).unsqueeze(0)  # real positions continue the prefix
                mask = torch.cat([p_mask[g], c_mask], dim=1)  # [B, P + W]
                c_hidden, _ = self._run_decoder(input_ids=c_ids.to(dev), attention_mask=mask.to(dev),
                                                position_ids=pos.to(dev), cache=cache, use_cache=True)
            del cache
            parts, sizes = [], []
            for r, c in enumerate(conts):
                parts.append(first[r:r + 1])
                if len(c) > 1:
                    parts.append(c_hidden[r, :len(c) - 1])
                sizes.append(len(c))
            sel = torch.cat(parts).float()  # [N, H]
            targets = torch.tensor([t for c in conts for t in c], dtype=torch.long, device=dev)
            return self._head_scores(sel, targets, sizes, vocab_stats)

    def _head_scores(self, sel: torch.Tensor, targets: torch.Tensor, sizes: list[int], vocab_stats: bool
                     ) -> list[TokenScores]:
        """Output head on the selected hidden states sel [N, H] -> one TokenScores per row of `sizes`."""
        logp, mu, sigma = head_logprobs(sel, self._head, targets, vocab_stats=vocab_stats,
                                        chunk=self.options.head_chunk, softcap=self._softcap)
        bounds = np.cumsum([0] + sizes)
        logp_np = logp.cpu().numpy()
        mu_np = mu.cpu().numpy() if mu is not None else None
        sigma_np = sigma.cpu().numpy() if sigma is not None else None
        return [TokenScores(logp_np[a:b], None if mu_np is None else mu_np[a:b],
                            None if sigma_np is None else sigma_np[a:b])
                for a, b in zip(bounds[:-1], bounds[1:])]

    # ---------------------------------------------------------------- sampling
    def sample(self, prompts: list[list[int]], cfg: SamplingConfig) -> list[list[list[int]]]:
        """[P][n] completions; see the module docstring for reproducibility."""
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty")
        jobs = [(i, j) for i in range(len(prompts)) for j in range(cfg.n_per_record)]
        out: list[list[list[int]]] = [[[] for _ in range(cfg.n_per_record)] for _ in prompts]
        lengths = [len(prompts[i]) for i, _ in jobs]
        for batch in length_batches(lengths, cfg.batch_size, max_tokens=1 << 62):
            rows = [jobs[b] for b in batch]
            seqs = [prompts[i] for i, _ in rows]
            sampler = SeededSampler([row_seed(cfg.seed, prompts[i], j) for i, j in rows], cfg.temperature, cfg.top_p)
            if self.options.share_prefill or self.options.sample_decoder == "loop":
                new = self._sample_loop(seqs, sampler, cfg.max_new_tokens, share=self.options.share_prefill)
            else:
                new = self._sample_generate(seqs, sampler, cfg.max_new_tokens)
            for (i, j), row in zip(rows, new):
                out[i][j] = trim_completion(row, self.eos_token_ids)
        return out

    def _sample_generate(self, seqs: list[list[int]], sampler: SeededSampler, max_new_tokens: int
                         ) -> list[list[int]]:
        """B rows through model.generate (greedy over the sampler's scores, which are -inf except its draw)."""
        from transformers import GenerationConfig, LogitsProcessorList

        gen_cfg = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                                   eos_token_id=self.eos_token_ids, pad_token_id=self.pad_token_id,
                                   temperature=None, top_p=None, top_k=None)
        ids, mask = left_pad(seqs, self.pad_token_id)
        model, autocast = self._sampling_model()
        with torch.inference_mode(), self._autocast(autocast):
            generated = model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                       generation_config=gen_cfg, logits_processor=LogitsProcessorList([sampler]))
        return generated[:, ids.shape[1]:].cpu().tolist()

    def _sample_loop(self, seqs: list[list[int]], sampler: SeededSampler, max_new_tokens: int, *, share: bool
                     ) -> list[list[int]]:
        """Decode B rows (prompts seqs, repeats allowed) with leakaudit.signals.decode.decode -> B token lists of
        max_new_tokens or fewer (all rows stop once every row has emitted an EOS; tokens after a row's EOS are
        padding). share: one prefill per distinct prompt, its cache rows gathered to the rows that repeat it."""
        dev = self.device
        rows = None
        if share:
            distinct: dict[tuple[int, ...], int] = {}
            group = [distinct.setdefault(tuple(p), len(distinct)) for p in seqs]
            ids, mask = left_pad([list(p) for p in distinct], self.pad_token_id)  # [G, P]
            rows = torch.tensor(group, dtype=torch.long, device=dev)
        else:
            ids, mask = left_pad(seqs, self.pad_token_id)  # [B, P]
        model, autocast = self._sampling_model()
        with torch.inference_mode(), self._autocast(autocast):
            new = decode(model, ids.to(dev), mask.to(dev), max_new_tokens=max_new_tokens, draw=sampler.draw,
                         eos_ids=self.eos_token_ids, pad_id=self.pad_token_id, rows=rows)
        return new.cpu().tolist()


def _cache_of(out: Any) -> Any:
    """The KV cache of a transformers model output (`cache` in transformers >= 5, `past_key_values` before)."""
    try:
        return out.cache
    except AttributeError:
        return getattr(out, "past_key_values", None)
