"""A hand-written sampling decode loop, shared by the OPD rollouts (shadow_models.rollout) and the signals stage
(HFBackend.sample): prefill the left-padded prompts once, then one forward of the last token per step on the
model's KV cache, with the next token drawn by a `draw` callable from the float32 last-position logits.

Why not `model.generate`: its prefill sends the last position to the LM head as ``hidden[:, -1:, :]``
(``logits_to_keep=1``), a strided [B, 1, H] view, and torch's CPU matmul runs a linear on such a view as a bmm
that first copies the [V, H] head weight once per row (pytorch/pytorch#151934): for smollm2-135m's bf16 copy
(49k x 576) that is 453 MB copied per prefill, 2.0 -> 0.58 CPU s for the prefill of 8 rollout prompts and 1.33x
on the whole 48-token rollout (bench/bench_decode.py, bench/results/decode.json; float32 weights and autocast,
which casts the view to a contiguous copy first, do not pay it). Here the prefill asks for the last position by
index (``logits_to_keep=tensor([P-1])``, which transformers gathers into a contiguous [B, 1, H]): the same dot
products, through one mm. The decode steps are generate's own forwards; what generate adds around them costs
little in transformers 5 (the decode steps alone: 83.5 vs 84.8 CPU ms per token for 8 rows, 1.02x).

The loop computes what generate's sampling loop computes, step for step, and nothing else:
- prefill: the whole prompt batch, attention mask as given, position ids counted over real tokens (0 on left
  padding: generate's own `cumsum - 1`, masked to 0), only the last position through the LM head;
- step t: the last token of every row, its position the row's previous one + 1, the 2D attention mask grown by a
  column of ones, the cache the model returned;
- logits cast to float32 (generate's ``.to(copy=True, dtype=float32)``), a token per row from `draw`, rows that
  have emitted an EOS get `pad_id` instead, and the loop stops when every row has finished or after
  `max_new_tokens` tokens (generate's MaxLength and EOS stopping criteria).
With the same `draw` (MultinomialDraw below is generate(do_sample=True)'s draw, RNG consumption included;
SeededSampler.draw is the signals stage's) the tokens are generate's: the one difference is the prefill head's
mm instead of bmm, which gave bit-identical logits on smollm2-135m in bf16 and in float32 (bench/results/
decode.json; in general the two may round differently, ~2e-5 on random float32 data, so a token could flip only
where a draw falls that close to a CDF boundary). Measured: the same tokens as generate on smollm2-135m's bf16
copy (8 x 48) and on a tiny float32 model (tests/test_decode.py, also through the trainer).

Cache: 'dynamic' (transformers' DynamicCache, made by the model at the prefill: one torch.cat per layer per step)
or 'static' (transformers' StaticCache, preallocated to prompt + max_new_tokens and written in place; attention
then spans the whole preallocated length, unwritten slots masked out). Static did not pay: 1.03x on the decode
step, 1.07x more with torch.compile of the decode step (which recompiles for every prompt width, i.e. at every
rollout), and in bf16 its longer masked attention rounds differently, so its tokens are not generate's. The
callers use 'dynamic'; the library's cache classes either way, nothing of the cache is hand-written.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import torch

from leakaudit.padding import position_ids

CACHES = ("dynamic", "static")

Draw = Callable[[torch.Tensor], torch.Tensor]
"""float32 logits [B, V] -> int64 tokens [B] (one per row)."""


class MultinomialDraw:
    """The draw of ``model.generate(do_sample=True, temperature=..., top_p=..., top_k=0)``, without its machinery:
    transformers' own TemperatureLogitsWarper / TopPLogitsWarper (only where generate would add them: temperature
    != 1, top_p < 1), softmax, then ``torch.multinomial(probs, 1)`` from `generator` (None: torch's global RNG, as
    generate draws). Same logits and same RNG state -> the same tokens as generate."""

    def __init__(self, temperature: float = 1.0, top_p: float = 1.0, generator: torch.Generator | None = None):
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        self.warpers: list[Any] = []
        if float(temperature) != 1.0:
            self.warpers.append(TemperatureLogitsWarper(float(temperature)))
        if float(top_p) < 1.0:
            self.warpers.append(TopPLogitsWarper(float(top_p)))
        self.generator = generator

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        scores = logits
        for warp in self.warpers:
            scores = warp(None, scores)  # neither warper reads input_ids
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, num_samples=1, generator=self.generator).squeeze(1)


def _forward_params(model: Any) -> set[str]:
    """Keyword names of the transformers forward under `model` (a peft model forwards its **kwargs to its base)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base.forward).parameters)


def cache_kwarg(model: Any) -> str:
    """The forward keyword of the KV cache: `cache` in transformers >= 5, `past_key_values` before."""
    return "cache" if "cache" in _forward_params(model) else "past_key_values"


def cache_of(out: Any) -> Any:
    """The KV cache of a transformers model output (`cache` in transformers >= 5, `past_key_values` before)."""
    try:
        return out.cache
    except AttributeError:
        return getattr(out, "past_key_values", None)


def static_cache(model: Any, batch: int, max_len: int) -> Any:
    """A transformers StaticCache for `batch` rows of up to `max_len` tokens (the constructor changed across
    versions: transformers >= 4.56's lazy `StaticCache(config=, max_cache_len=)`, else the eager one that takes the
    batch size, device and dtype)."""
    from transformers import StaticCache

    params = inspect.signature(StaticCache.__init__).parameters
    if "max_batch_size" in params:
        p = next(model.parameters())
        return StaticCache(config=model.config, max_batch_size=batch, max_cache_len=max_len, device=p.device,
                           dtype=p.dtype)
    return StaticCache(config=model.config, max_cache_len=max_len)


def decode(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int, draw: Draw,
           eos_ids: Sequence[int], pad_id: int, cache: str = "dynamic", rows: torch.Tensor | None = None
           ) -> torch.Tensor:
    """Sample up to `max_new_tokens` tokens per row -> int64 [B, T], T <= max_new_tokens (see the module docstring).

    input_ids, attention_mask: [G, P] left-padded prompts (on the model's device). rows: optional [B] indices into
    the G prompts (repeats allowed): the prompts are prefilled once each and their cache rows gathered to B rows
    (HFOptions.share_prefill); None: B = G, row i decodes prompt i. A row's tokens after its first EOS are
    `pad_id`. Call under torch.no_grad / inference_mode, with the model in eval mode.
    """
    if cache not in CACHES:
        raise ValueError(f"cache={cache!r}: expected one of {CACHES}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: must be >= 1")
    dev = input_ids.device
    kw = cache_kwarg(model)
    keep = "logits_to_keep" in _forward_params(model)
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=dev)
    p_pos = position_ids(attention_mask)
    n_prompts, width = input_ids.shape
    n_rows = n_prompts if rows is None else int(rows.shape[0])
    pre: dict[str, Any] = {}
    if cache == "static":
        if rows is not None:
            raise ValueError("cache='static' with shared prompt rows is not supported (the static cache holds a "
                             "fixed batch): use cache='dynamic'")
        pre[kw] = static_cache(model, n_rows, width + max_new_tokens)
        # the mask spans the whole preallocated cache; columns of tokens not generated yet stay 0
        full = torch.zeros((n_rows, width + max_new_tokens), dtype=attention_mask.dtype, device=dev)
        full[:, :width] = attention_mask
        mask = full[:, :width]
    else:
        mask = attention_mask
    if keep:  # the last position by index: a contiguous [G, 1, H] into the head (see the module docstring)
        pre["logits_to_keep"] = torch.tensor([width - 1], dtype=torch.long, device=dev)
    out = model(input_ids=input_ids, attention_mask=mask if cache == "dynamic" else full, position_ids=p_pos,
                use_cache=True, **pre)
    kv = cache_of(out)
    logits = out.logits[:, -1].to(dtype=torch.float32, copy=True)
    del out
    pos = p_pos[:, -1:]  # [G, 1] each row's last position
    if rows is not None:
        kv.batch_select_indices(rows)
        logits, pos, mask = logits[rows], pos[rows], mask[rows]
    unfinished = torch.ones(n_rows, dtype=torch.bool, device=dev)
    pad = torch.full((n_rows,), int(pad_id), dtype=torch.long, device=dev)
    steps: list[torch.Tensor] = []
    for step in range(max_new_tokens):
        tokens = torch.where(unfinished, draw(logits), pad)
        steps.append(tokens)
        unfinished &= ~torch.isin(tokens, eos)
        if step == max_new_tokens - 1 or not bool(unfinished.any()):
            break
        pos = pos + 1
        if cache == "static":
            full[:, width + step] = 1
            step_mask = full
        else:
            mask = torch.cat([mask, mask.new_ones((n_rows, 1))], dim=1)
            step_mask = mask
        out = model(input_ids=tokens.unsqueeze(1), attention_mask=step_mask, position_ids=pos, use_cache=True,
                    **{kw: kv}, **({"logits_to_keep": 1} if keep else {}))
        kv = cache_of(out)
        logits = out.logits[:, -1].to(dtype=torch.float32, copy=True)
        del out
    return torch.stack(steps, dim=1)
