"""The frozen teacher's KV cache over each record's context, computed once and reused at every OPD step.

The teacher scores a completion with ``teacher_prompt_ids(record)`` (prompt + privileged text) in its context. That
context is the same token list for a record at every step and epoch, and the teacher does not change, so its keys
and values over the context are the same too. ``TeacherPrefixCache`` keeps them per context (keyed by the token
ids themselves) and ``logits`` runs the teacher only over the completion.

What is cached is the context *minus its last token*: each step feeds ``[last context token, completion...]`` on top
of it, so the logits predicting completion token 0 (which come from the last context position) are computed in the
same forward as the rest, and nothing but keys and values is stored (no vocabulary-wide logits per record). The
extra token is one more row per record in a forward of ~C + 1 rows instead of ~P + C.

Batching: every row's cached keys/values are left-padded to the batch's widest cache, the attention mask is 0 on
that padding, and position ids are counted over real tokens exactly as ``batching.completion_logits`` counts them
over ``[left-padded context | right-padded completion]`` — so every completion position sees the same keys, values
and position as in the full forward, and the logits agree to float rounding (tests/test_teacher_cache.py).
``rows_per_forward`` splits the batch into chunks (1 = one record per forward, no padding at all).

The stored tensors are never handed to a model: each forward gets a fresh ``DynamicCache`` built from (copies of)
them, because a forward appends the completion's keys/values to the cache object it is given.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from leakaudit.errors import ConfigError
from leakaudit.padding import position_ids


@dataclass(frozen=True)
class PrefixEntry:
    """One context's cached state: per layer (keys, values), each [1, kv_heads, n, head_dim], n = len(context) - 1,
    and the context's last token (fed again in front of each completion)."""

    kv: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    length: int
    last_token: int

    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)


def _base(model: Any) -> Any:
    get = getattr(model, "get_base_model", None)  # a PEFT model: its transformers model
    return get() if callable(get) else model


def _cache_kwarg(model: Any) -> str:
    """transformers >= 5 names the forward's cache argument `cache` (`past_key_values` deprecated); 4.x
    `past_key_values`."""
    params = inspect.signature(_base(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _dynamic_cache(kv: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Any:
    from transformers import DynamicCache

    if kv is None:
        return DynamicCache()
    return DynamicCache(list(kv))  # ddp_cache_data: each layer's update() copies them (torch.cat), never aliases


class TeacherPrefixCache:
    """Keys and values of one frozen teacher over teacher contexts, filled lazily (``ensure``), reused by ``logits``.

    Valid only while the scoring model is unchanged: one instance per teacher (a frozen model, or a LoRA student's
    base under its disabled adapter, whose weights are frozen too) and per precision (the forward's autocast).
    ``clear`` frees every tensor.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[int, ...], PrefixEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def nbytes(self) -> int:
        return sum(e.nbytes() for e in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()

    def entry(self, context: Sequence[int]) -> PrefixEntry:
        return self._entries[tuple(int(t) for t in context)]

    @torch.no_grad()
    def ensure(self, model: Any, contexts: Sequence[Sequence[int]]) -> int:
        """Compute the cached state of every context not yet cached (one forward each, unpadded); returns how many
        were computed. Runs under the caller's autocast, as the completion forwards will."""
        device = next(model.parameters()).device
        name = _cache_kwarg(model)
        added = 0
        for context in contexts:
            key = tuple(int(t) for t in context)
            if key in self._entries:
                continue
            if not key:
                raise ConfigError("teacher context is empty: nothing to condition the teacher on")
            n = len(key) - 1
            kv: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
            if n > 0:
                ids = torch.tensor([key[:-1]], dtype=torch.long, device=device)
                cache = _dynamic_cache()
                model(input_ids=ids, attention_mask=torch.ones_like(ids),
                      position_ids=torch.arange(n, device=device).unsqueeze(0), use_cache=True,
                      logits_to_keep=1, **{name: cache})
                kv = _layers_kv(cache)
            self._entries[key] = PrefixEntry(kv=kv, length=n, last_token=key[-1])
            added += 1
        return added

    @torch.no_grad()
    def logits(self, model: Any, contexts: Sequence[Sequence[int]], comp_ids: torch.Tensor,
               comp_mask: torch.Tensor, *, rows_per_forward: int | None = None) -> torch.Tensor:
        """Teacher logits [B, C, V] predicting each completion token: what ``batching.completion_logits(model,
        contexts, comp_ids, comp_mask, pad_id)`` returns, from the cached contexts (``ensure`` is called first).

        `rows_per_forward`: records per completion forward (None = the whole batch in one, left-padded caches)."""
        self.ensure(model, contexts)
        entries = [self.entry(c) for c in contexts]
        step = len(entries) if rows_per_forward is None else max(int(rows_per_forward), 1)
        parts = [self._chunk_logits(model, entries[i:i + step], comp_ids[i:i + step], comp_mask[i:i + step])
                 for i in range(0, len(entries), step)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)

    def _chunk_logits(self, model: Any, entries: Sequence[PrefixEntry], comp_ids: torch.Tensor,
                      comp_mask: torch.Tensor) -> torch.Tensor:
        device = comp_ids.device
        b, c = comp_ids.shape
        width = max(e.length for e in entries)
        last = torch.tensor([[e.last_token] for e in entries], dtype=torch.long, device=device)
        kv_mask = torch.zeros((b, width), dtype=comp_mask.dtype, device=device)
        for i, e in enumerate(entries):
            kv_mask[i, width - e.length:] = 1
        mask = torch.cat([kv_mask, torch.ones_like(last, dtype=comp_mask.dtype), comp_mask], dim=1)
        pos = position_ids(mask)[:, width:]
        ids = torch.cat([last, comp_ids], dim=1)
        kwargs: dict[str, Any] = {}
        if width > 0:
            kwargs[_cache_kwarg(model)] = _dynamic_cache(_padded_kv(entries, width))
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=width > 0,
                    logits_to_keep=c + 1, **kwargs)
        return out.logits[:, :-1, :]


def _layers_kv(cache: Any) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Per-layer (keys, values) of a filled DynamicCache (transformers >= 4.56: `cache.layers`)."""
    out = []
    for layer in cache.layers:
        if getattr(layer, "is_sliding", False):
            raise ConfigError("teacher_prefix_cache: the teacher has sliding-window attention layers, whose cache "
                              "keeps only the window; turn teacher_prefix_cache off for this model")
        out.append((layer.keys.detach(), layer.values.detach()))
    return tuple(out)


def _padded_kv(entries: Sequence[PrefixEntry], width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the entries' keys/values stacked on the batch axis, each left-padded with zeros to `width`."""
    if len(entries) == 1 and entries[0].length == width:
        return list(entries[0].kv)
    n_layers = max(len(e.kv) for e in entries)
    ref = next(e for e in entries if e.length == width)
    out = []
    for layer in range(n_layers):
        k0, v0 = ref.kv[layer]
        keys = k0.new_zeros((len(entries), k0.shape[1], width, k0.shape[3]))
        values = v0.new_zeros((len(entries), v0.shape[1], width, v0.shape[3]))
        for i, e in enumerate(entries):
            if e.length:
                k, v = e.kv[layer]
                keys[i, :, width - e.length:] = k[0]
                values[i, :, width - e.length:] = v[0]
        out.append((keys, values))
    return out
