"""The shape of the base model the cost model needs, read from its config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


@dataclass(frozen=True)
class ModelShape:
    """What the cost model needs of a causal LM (read from its config.json)."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def _layer_params(self) -> int:
        """Matmul parameters of one decoder layer: q and o projections (hidden x hidden), k and v (hidden x kv heads'
        width) and the MLP's three (hidden x intermediate)."""
        kv = self.kv_heads * self.head_dim
        return 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate

    @property
    def params(self) -> int:
        """All parameters (embedding, layers, head unless tied); biases and norms left out."""
        return self.layers * self._layer_params + self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def matmul_params(self) -> int:
        """Parameters a token's forward multiplies by: the layers and the LM head (not the embedding lookup)."""
        return self.layers * self._layer_params + self.vocab * self.hidden

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ModelShape":
        heads = int(cfg["num_attention_heads"])
        return cls(hidden=int(cfg["hidden_size"]), layers=int(cfg["num_hidden_layers"]),
                   intermediate=int(cfg["intermediate_size"]), heads=heads,
                   kv_heads=int(cfg.get("num_key_value_heads") or heads), vocab=int(cfg["vocab_size"]),
                   tied=bool(cfg.get("tie_word_embeddings", False)))


def model_shape(ref: str, *, trust_remote_code: bool = False) -> ModelShape:
    """The shape of a model reference (offline name, directory or hub id) from its config.json, read without loading
    weights (a hub id needs the network or a cached copy: leakaudit.models.resolve_model_ref)."""
    from leakaudit.models import resolve_model_ref

    path = Path(resolve_model_ref(ref))
    return ModelShape.from_config(json.loads((path / "config.json").read_text(encoding="utf-8")))
