"""transformers backend: batched, left-padded scoring and per-row seeded sampling (CPU or GPU).

Scoring sorts sequences by length, packs them into batches bounded by `score_batch_size` sequences and
`max_batch_tokens` padded tokens, runs the decoder body (optionally under bf16 autocast), and sends only the
positions that predict a continuation token through the output head, in float32 (see logprobs.py).

Sampling calls `model.generate` with a `SeededSampler` (sampler.py): trajectory j of a prompt depends only on
(cfg.seed, prompt ids, j), not on batch size or order, up to float noise (a flip needs the row's uniform draw
within ~1e-6 of a CDF boundary). Under bf16 autocast (the default for sampling on bf16-native hardware) the
logits move more with batch shape, so the guarantee there is: same seed, inputs and batch_size -> same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from leakaudit.errors import ConfigError
from leakaudit.padding import left_pad, position_ids
from leakaudit.signals.backend import SamplingConfig, TokenScores, check_score_inputs
from leakaudit.signals.logprobs import head_logprobs
from leakaudit.signals.sampler import SeededSampler, row_seed, trim_completion


@dataclass(frozen=True)
class HFOptions:
    """Options of the transformers backend."""

    device: str = "cpu"
    """torch device string ('cpu', 'cuda', 'cuda:1')."""
    autocast_bf16: bool = False
    """Score with the decoder body under bf16 autocast (the output head and log-softmax stay float32).
    Off by default: on smollm2-135m (bench/results/signals.json, 1 CPU thread with avx512_bf16) it is 2.2x
    faster than fp32 but moves per-token log-probs by mean 0.016 / max 0.18 nats and Min-K%++'s mu by up to
    0.25, noise of the size of the membership gaps the attacks look for; turn on for quick looks."""
    sample_autocast_bf16: bool | None = None
    """Sample under bf16 autocast. None (default): on where bf16 matmuls are native (CUDA with bf16; CPUs with
    avx512_bf16/AMX via oneDNN), where it is ~1.9x faster; the samples come from a slightly perturbed model,
    which does not bias the attacks because every model scores them in fp32."""
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
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if self.eos_token_ids is not None:
            object.__setattr__(self, "eos_token_ids", tuple(int(e) for e in self.eos_token_ids))
            if not self.eos_token_ids:
                raise ConfigError("eos_token_ids must name at least one token (or be None)")


def bf16_is_native(device: torch.device) -> bool:
    """Whether bf16 matmuls run natively (and so faster than fp32) on `device`."""
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        probe = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
        return bool(probe()) if probe is not None else False
    return False


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
        model = load_model(model_ref, LoadOptions(dtype="float32", device=opts.device),
                           trust_remote_code=trust_remote_code)
        self._init(model, opts)
        self.model_ref = model_ref

    @classmethod
    def from_model(cls, model: Any, **options: Any) -> "HFBackend":
        """Wrap an already loaded model (eval mode is set here)."""
        self = cls.__new__(cls)
        opts = HFOptions(**options)
        model.to(opts.device)
        model.eval()
        self._init(model, opts)
        self.model_ref = getattr(model.config, "_name_or_path", "")
        return self

    def _init(self, model: Any, opts: HFOptions) -> None:
        self.model = model
        self.options = opts
        self.device = torch.device(opts.device)
        self.sample_bf16 = (bf16_is_native(self.device) if opts.sample_autocast_bf16 is None
                            else bool(opts.sample_autocast_bf16))
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

    def _autocast(self, enabled: bool) -> Any:
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=enabled)

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
            with self._autocast(self.options.autocast_bf16):
                hidden = self._decoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                       position_ids=pos.to(self.device), use_cache=False).last_hidden_state
            sel = hidden[rows_t.to(self.device), cols_t.to(self.device)].float()  # [N, H]
            targets = ids[rows_t, cols_t + 1].to(self.device)
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
        from transformers import GenerationConfig, LogitsProcessorList

        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty")
        jobs = [(i, j) for i in range(len(prompts)) for j in range(cfg.n_per_record)]
        out: list[list[list[int]]] = [[[] for _ in range(cfg.n_per_record)] for _ in prompts]
        lengths = [len(prompts[i]) for i, _ in jobs]
        gen_cfg = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=cfg.max_new_tokens,
                                   eos_token_id=self.eos_token_ids, pad_token_id=self.pad_token_id,
                                   temperature=None, top_p=None, top_k=None)
        for batch in length_batches(lengths, cfg.batch_size, max_tokens=1 << 62):
            rows = [jobs[b] for b in batch]
            seqs = [prompts[i] for i, _ in rows]
            ids, mask = left_pad(seqs, self.pad_token_id)
            sampler = SeededSampler([row_seed(cfg.seed, prompts[i], j) for i, j in rows], cfg.temperature, cfg.top_p)
            with torch.inference_mode(), self._autocast(self.sample_bf16):
                generated = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                                generation_config=gen_cfg,
                                                logits_processor=LogitsProcessorList([sampler]))
            new = generated[:, ids.shape[1]:].cpu().tolist()
            for (i, j), row in zip(rows, new):
                out[i][j] = trim_completion(row, self.eos_token_ids)
        return out
