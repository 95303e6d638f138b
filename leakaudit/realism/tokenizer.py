"""Decoding a target's samples for the quality measures: the run's tokenizer, loaded once and only when needed."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from leakaudit.errors import LeakauditError


def tokenizer_loader(config: Mapping[str, Any], tokenizer: Any) -> Callable[[], tuple[Any, str | None]]:
    """A function returning (tokenizer | None, why not): the given one, else study.yaml's base_model's, loaded
    on first use (leakaudit.models.load_tokenizer) and kept."""
    cache: dict[str, tuple[Any, str | None]] = {}

    def get() -> tuple[Any, str | None]:
        if tokenizer is not None:
            return tokenizer, None
        if "tok" not in cache:
            ref = config.get("base_model")
            if not ref:
                cache["tok"] = (None, "study.yaml names no base_model: samples not decoded")
            else:
                from leakaudit.models import load_tokenizer

                try:
                    cache["tok"] = (load_tokenizer(str(ref), trust_remote_code=bool(config.get("trust_remote_code"))),
                                    None)
                except (LeakauditError, OSError, ValueError, ImportError) as e:
                    cache["tok"] = (None, f"tokenizer of {ref} not loadable ({type(e).__name__}: {e}): samples "
                                          "not decoded")
        return cache["tok"]

    return get


def decoder(tokenizer: Any) -> Callable[[Sequence[np.ndarray]], list[str]]:
    """Token arrays -> texts, special tokens skipped (how leakaudit.literalness.sample_literalness decodes)."""
    return lambda toks: [tokenizer.decode(list(map(int, t)), skip_special_tokens=True) for t in toks]
