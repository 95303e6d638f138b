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

The options named above are HFOptions' (hf_options.py); rows are grouped into forwards by batching.py.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from leakaudit.errors import ConfigError
from leakaudit.models import bf16_copy
from leakaudit.padding import left_pad, position_ids, right_pad
from leakaudit.precision import bf16_is_native
from leakaudit.signals.batching import length_batches, prefix_batches
from leakaudit.signals.decode import cache_of, decode
from leakaudit.signals.hf_options import HFOptions, resolve_device
from leakaudit.signals.logprobs import head_logprobs
from leakaudit.signals.sampler import SeededSampler, row_seed, trim_completion
from leakaudit.signals.types import SamplingConfig, TokenScores, check_score_inputs


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


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
        return out.last_hidden_state, cache_of(out)

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
