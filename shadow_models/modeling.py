"""Loading the trainable student and the frozen teacher, LoRA wrapping, autocast, and saving weights."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from leakaudit.errors import ConfigError
from leakaudit.models import LoadOptions, load_model, quiet_transformers


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when enabled (fp32 master weights stay untouched).

    Applied by hand rather than through ``Accelerator(mixed_precision=...)``: accelerate's state is a
    process-wide singleton whose precision cannot change after the first Accelerator, and one process trains
    many students (a study, the benchmark, the tests) with different settings.
    """
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def load_trainable(ref: str, device: torch.device, *, lora_rank: int, lora_alpha: int, lora_dropout: float,
                   target_modules: tuple[str, ...], trust_remote_code: bool = False) -> Any:
    """The student in fp32 and train mode; base dropout off (as TRL does for distillation); LoRA if rank > 0."""
    from trl.trainer.utils import disable_dropout_in_model

    model = load_model(ref, LoadOptions(dtype="float32", device=str(device)), trust_remote_code=trust_remote_code)
    disable_dropout_in_model(model)
    if lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(r=lora_rank, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                         target_modules=list(target_modules), task_type="CAUSAL_LM")
        model = get_peft_model(model, cfg)
    model.train()
    return model


def setup_training(base_model: str, config: Any, *, trust_remote_code: bool = False
                   ) -> tuple[Any, Any, torch.device, Any, Any, Any]:
    """The start both trainers share: the config with its bf16_autocast resolved on the device accelerate gives
    ('auto' -> whether bf16 is native there, leakaudit.precision), an Accelerator, seeds, the autocast context,
    the tokenizer and the trainable model (LoRA-wrapped when config.lora_rank > 0). Returns (config, accelerator,
    device, amp, tokenizer, model): callers use the returned config, so meta.json, the checkpoint fingerprint and
    every later choice see the precision the model was trained in. `trust_remote_code` reaches both the tokenizer
    and the model load."""
    from dataclasses import replace

    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from leakaudit.models import load_tokenizer
    from leakaudit.precision import local_device, resolve_bf16

    from accelerate.utils import DistributedDataParallelKwargs

    # cpu=True where there is no GPU: under `accelerate launch --multi_gpu` (torchrun) on a CPU machine accelerate
    # then joins the processes over gloo instead of running each one alone (it does not treat CPU as a device
    # with a distributed backend otherwise). broadcast_buffers off: DDP would broadcast the buffers (rotary
    # frequencies, never trained, equal on every process) at every forward, a collective that hangs when one
    # process runs more micro-batches of a step than another (uneven splits of a batch)
    ddp = DistributedDataParallelKwargs(broadcast_buffers=False)
    accelerator = Accelerator(cpu=local_device().type == "cpu", kwargs_handlers=[ddp])
    set_seed(config.seed)
    device = accelerator.device
    config = replace(config, bf16_autocast=resolve_bf16(config.bf16_autocast, device))
    amp = autocast(device, config.bf16_autocast)
    tokenizer = load_tokenizer(base_model, trust_remote_code=trust_remote_code)
    model = load_trainable(base_model, device, lora_rank=config.lora_rank, lora_alpha=config.lora_alpha,
                           lora_dropout=config.lora_dropout, target_modules=config.lora_target_modules,
                           trust_remote_code=trust_remote_code)
    return config, accelerator, device, amp, tokenizer, model


def load_frozen(ref: str, device: torch.device, *, trust_remote_code: bool = False) -> Any:
    """A frozen fp32 model in eval mode (the teacher); forward passes run under no_grad/autocast by the caller."""
    model = load_model(ref, LoadOptions(dtype="float32", device=str(device)), trust_remote_code=trust_remote_code)
    model.requires_grad_(False)
    model.eval()
    return model


@contextlib.contextmanager
def teacher_view(teacher: Any | None, student: Any) -> Any:
    """The model that scores as teacher: `teacher`, or, when None (LoRA self-distillation), the student's own
    frozen base with its adapter switched off — the exact base weights without a second copy in memory
    (as TRL's SDFT does for PEFT students)."""
    if teacher is not None:
        yield teacher
        return
    with student.disable_adapter():
        yield student


def check_same_vocab(student: Any, teacher: Any, tokenizer: Any, teacher_ref: str) -> None:
    """The teacher must score the student's token ids: same vocabulary size as the student and tokenizer."""
    s = student.get_output_embeddings().weight.shape[0]
    t = teacher.get_output_embeddings().weight.shape[0]
    if s != t or t < len(tokenizer):
        raise ConfigError(f"teacher {teacher_ref!r} has vocabulary {t}, student {s}, tokenizer {len(tokenizer)}: "
                          "the teacher must share the student's tokenizer")


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """Trainable parameters by name (tied weights appear once), detached CPU copies."""
    return {n: p.detach().to("cpu").contiguous().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_student(model: Any, tokenizer: Any, out: Path) -> None:
    """Full model: config + model.safetensors + tokenizer. LoRA: the adapter (safetensors) + base config +
    tokenizer, so ``leakaudit.models.load_model(out)`` finds a config.json and merges the adapter. transformers'
    "Writing model shards" bar stays off (a study's log shows its stages, not one bar per saved model)."""
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
        if hasattr(model, "peft_config"):
            model.get_base_model().config.save_pretrained(out)
        tokenizer.save_pretrained(out)
