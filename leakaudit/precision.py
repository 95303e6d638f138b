"""Which precision the trainers compute in: `bf16_autocast: auto` resolved against the device that trains.

Why a machine-dependent default: bf16 autocast pays only where bf16 matmuls are native. On the AMX VM bf16
torch.matmul runs 8.5x faster than fp32 (1505 vs 177 GFLOP/s, bench/results/peak_intel-xeon-processor-amx-2c.json);
on an AVX2-only AMD EPYC (no avx512_bf16, no amx_bf16; oneDNN reports no bf16) it is emulated: bf16 torch.matmul
0.9 GFLOP/s against 92 in fp32 at one thread (bench/results/peak_amd-epyc-avx2-2c.json; a bf16-autocast F.linear of
a student's shape 9.3 against 76), and a whole OPD step is measured in both precisions in
bench/results/opd_step_precision_amd-epyc-avx2-2c.json. On an AMD EPYC with avx512_bf16 and no AMX, bf16 is native
but its margin smaller: matmul 2.2x fp32, the OPD step 1.59x (bench/results/peak_amd-epyc-avx512bf16-2c.json,
opd_step_precision_amd-epyc-avx512bf16-2c.json). So 'auto' (the presets' setting) means
bf16 autocast where bf16 is native on the training device and fp32 elsewhere; true / false force either.

The resolution changes the arithmetic, so a study resolves it once, before anything is hashed
(`resolve_study_precision`): the run's study.yaml then says true or false, its config hash differs between a
native and an emulating machine, and a run started on one is not silently continued in another precision on the
other (leakaudit.pipeline.checks.check_run_dir_config names the key). The trainers resolve 'auto' themselves too
(a direct shadow_models call), on the device accelerate gives them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

AUTO = "auto"
"""The bf16_autocast setting that follows the device: on where bf16 is native, off where it is emulated."""


def bf16_is_native(device: torch.device) -> bool:
    """Whether bf16 matmuls run natively (and so faster than fp32) on `device`: CUDA's own answer; on CPU,
    oneDNN's (avx512_bf16 or amx_bf16 present)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        probe = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
        return bool(probe()) if probe is not None else False
    return False


def valid_bf16_setting(value: Any) -> bool:
    """True for the settings bf16_autocast takes: true, false or 'auto'."""
    return isinstance(value, bool) or value == AUTO


def resolve_bf16(setting: bool | str, device: torch.device, *, native: bool | None = None) -> bool:
    """The bf16_autocast a trainer runs with: a bool as given; 'auto' -> bf16_is_native(device) (or `native`
    when the caller already knows it: a Ray GPU job's device cannot be probed from a CPU driver)."""
    if isinstance(setting, bool):
        return setting
    if setting != AUTO:
        raise ValueError(f"bf16_autocast must be true, false or {AUTO!r}, got {setting!r}")
    return bf16_is_native(device) if native is None else native


def local_device() -> torch.device:
    """The device accelerate gives a trainer in this process: cuda when available, else cpu."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def student_device(execution: Any) -> tuple[torch.device, bool | None]:
    """Where a study's students train, and whether bf16 is known native there without probing: a Ray job that asks
    for a GPU trains on one (taken as native: every GPU with bf16 autocast worth using, Ampere on, has it; an older
    GPU needs bf16_autocast=false set by hand); otherwise this process's own device (local backend, or Ray jobs
    on CPUs, which here are this machine's)."""
    if execution.backend == "ray" and execution.gpus_per_student > 0:
        return torch.device("cuda"), True
    return local_device(), None


def resolve_study_precision(cfg: Any) -> tuple[Any, dict[str, Any]]:
    """(cfg with training.bf16_autocast and teacher.prep.bf16_autocast as bools, a record of the resolution).
    The students resolve on `student_device(cfg.execution)`; the prepared teacher is trained by the driver,
    so on this process's device. The record (written to env.json) holds, per trainer, the setting, the device,
    whether bf16 is native there and the result."""
    dev, known = student_device(cfg.execution)
    teacher_dev = local_device()
    training = resolve_bf16(cfg.training.bf16_autocast, dev, native=known)
    prep = resolve_bf16(cfg.teacher.prep.bf16_autocast, teacher_dev)
    record = {
        "training": {"setting": cfg.training.bf16_autocast, "device": dev.type,
                     "bf16_native": known if known is not None else bf16_is_native(dev), "bf16_autocast": training},
        "teacher_prep": {"setting": cfg.teacher.prep.bf16_autocast, "device": teacher_dev.type,
                         "bf16_native": bf16_is_native(teacher_dev), "bf16_autocast": prep},
    }
    if training == cfg.training.bf16_autocast and prep == cfg.teacher.prep.bf16_autocast:
        return cfg, record
    teacher = replace(cfg.teacher, prep=replace(cfg.teacher.prep, bf16_autocast=prep))
    return replace(cfg, training=replace(cfg.training, bf16_autocast=training), teacher=teacher), record
