"""A bf16 copy of the student's current weights, used only to sample its rollouts.

Why: under bf16 autocast every decode step of ``model.generate`` runs the fp32 student through autocast's casts
(weights once per generate, activations at every op), and a LoRA student also pays its unmerged adapters at every
decode step. Sampling from a plain bf16 model instead is ~1.2x faster on smollm2-135m (bench/bench_opd_step.py).
The copy is refreshed after every optimizer step (one cast of the weights, ~0.1 s for 135M parameters); a LoRA
student's adapters are merged into it (``W + scale * B @ A``, peft's ``get_delta_weight``) without touching the
student, so the student's fp32 base weights never go through peft's merge/unmerge round trip and its rounding.

What changes: the rollouts are drawn from the student rounded to bf16 (a plain bf16 forward: norms and softmax in
bf16 too) rather than from the fp32 student under autocast; both are bf16 approximations of the same policy, and
the update still scores every completion with the fp32 student under autocast, exactly as before. Only used when
the trainer runs under bf16 autocast (``OPDConfig.rollout_bf16_copy``); fp32 training samples from the student.
"""

from __future__ import annotations

from typing import Any

import torch

from leakaudit.models import bf16_copy


def _lora_layers(model: Any) -> dict[str, Any]:
    """peft LoRA layers of `model` by their name in the plain model ('model.layers.0.self_attn.q_proj')."""
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            out[name[len(prefix):] if name.startswith(prefix) else name] = module
    return out


class BF16RolloutPolicy:
    """A frozen bf16 plain-transformers copy of `student` (a transformers model or a peft LoRA model), eval mode.

    ``sync(student)`` writes the student's current (merged) weights into it; ``model`` is what generate runs.
    Memory: 2 bytes per parameter (270 MB for 135M). Built with leakaudit.models.bf16_copy (the signals stage's
    sampling copy), so buffers such as the rotary inv_freq stay fp32: rounding them to bf16 would shift every
    rotary phase by up to ~0.4% of the position.
    """

    def __init__(self, student: Any) -> None:
        if hasattr(student, "peft_config"):
            self._adapter = student.active_adapter
            if isinstance(self._adapter, (list, tuple)):
                self._adapter = self._adapter[0]
            plain = bf16_copy(student.get_base_model())
            self._lora = _lora_layers(student)
            # the copy holds peft's LoraLayer wrappers too: replace each by its base layer (weights merged in sync)
            for name in self._lora:
                parent_name, _, child = name.rpartition(".")
                parent = plain.get_submodule(parent_name) if parent_name else plain
                setattr(parent, child, getattr(parent, child).get_base_layer())
        else:
            self._adapter, self._lora = None, {}
            plain = bf16_copy(student)
        self.model = plain  # bf16 parameters, buffers (the rotary inv_freq) in their own dtype, eval mode
        self._targets = dict(self.model.named_parameters())
        self.sync(student)

    @torch.no_grad()
    def sync(self, student: Any) -> None:
        """Copy the student's current weights (LoRA merged) into the bf16 model."""
        if not self._lora:
            for name, param in student.named_parameters():
                self._targets[name].copy_(param)
            return
        for name, layer in self._lora.items():
            base = layer.get_base_layer()
            merged = base.weight + layer.get_delta_weight(self._adapter)
            self._targets[f"{name}.weight"].copy_(merged)
        for name, param in student.named_parameters():  # modules_to_save and other trainable non-LoRA weights
            if param.requires_grad and "lora_" not in name:
                plain = name.removeprefix("base_model.model.").replace(".modules_to_save.default", "")
                if plain in self._targets:
                    self._targets[plain].copy_(param)
