"""Options of the transformers backend (leakaudit.signals.hf_backend), checked when made, and the device they
name."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from leakaudit.errors import ConfigError


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
