"""GPU classes and the seconds a study's stages would take on one GPU of a class (dense work at a fraction of its
bf16 peak, decode steps bound by its memory bandwidth or their kernel launches)."""

from __future__ import annotations

from dataclasses import dataclass

from leakaudit.cost.estimate import StudyCost


@dataclass(frozen=True)
class GPUClass:
    """A GPU's dense bf16 peak (FLOP/s, no sparsity) and memory bandwidth (bytes/s), from the vendor's data sheet."""

    name: str
    bf16_flops: float
    bandwidth: float
    memory_gb: float


def gpu_classes() -> dict[str, GPUClass]:
    """The GPU classes `--gpu` accepts (SXM parts where there are two)."""
    cards = [GPUClass("H100", 989e12, 3.35e12, 80), GPUClass("H200", 989e12, 4.8e12, 141),
             GPUClass("A100-80GB", 312e12, 2.04e12, 80), GPUClass("L40S", 362e12, 0.864e12, 48),
             GPUClass("A10G", 125e12, 0.6e12, 24), GPUClass("RTX4090", 165e12, 1.01e12, 24)]
    return {c.name: c for c in cards}


KERNEL_LAUNCH_S_PER_LAYER = 1e-3
"""A decode step's floor per layer on a GPU, assumed: transformers' eager decoding spends about 1 ms per layer per
token in Python and kernel launches whatever the model's size (~25 ms a token for a 24-layer 0.5B model), so small
models are launch-bound, not bandwidth-bound. Not measured here: bench/gpu_check.py's signals part measures sampling
tokens/s at the Qwen2.5-0.5B shape, the number to replace it with."""


def seconds_on_gpu(cost: StudyCost, gpu: GPUClass, *, dense_utilisation: float = 0.35,
                   bandwidth_utilisation: float = 0.5, bf16: bool = True) -> dict[str, float]:
    """Stage -> estimated seconds on one GPU of class `gpu`: dense FLOPs at a fraction of its bf16 peak, and each
    decode step reading the weights once (bf16 copy) at a fraction of its bandwidth, or its kernel launches, which
    ever is longer."""
    weight_bytes = cost.shape.params * (2 if bf16 else 4)
    step = max(weight_bytes / (gpu.bandwidth * bandwidth_utilisation), cost.shape.layers * KERNEL_LAUNCH_S_PER_LAYER)
    return {s: c.dense_flops / (gpu.bf16_flops * dense_utilisation) + c.decode_steps * step
            for s, c in cost.stages.items()}
