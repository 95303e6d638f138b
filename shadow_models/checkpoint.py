"""Resumable training checkpoints without pickle: trainable weights and AdamW state in safetensors, the rest JSON.

Lives in ``leakaudit.io.checkpoint_dir(out_dir)``, ``<out_dir>.ckpt/`` (outside the staging directory, which every
attempt wipes), is itself written through ``staging_dir`` + DONE so a crash while checkpointing never leaves a half
checkpoint, and is only resumed when its fingerprint (config hash, base, teacher, record ids) matches the new run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from leakaudit.io import complete_version, mark_done, read_json, restore_previous, staging_dir, write_json, write_text

from shadow_models.modeling import trainable_state


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict]]:
    sd = optimizer.state_dict()
    tensors = {}
    for idx, state in sd["state"].items():
        for key, value in state.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            tensors[f"{idx}/{key}"] = t.detach().to("cpu").contiguous().clone()
    return tensors, sd["param_groups"]


def save_checkpoint(ckpt: Path, *, model: Any, optimizer: torch.optim.Optimizer, next_step: int,
                    fingerprint: dict, ledger_lines: list[str]) -> None:
    """Everything needed to continue at `next_step`: weights, AdamW moments, the ledger so far."""
    with staging_dir(ckpt) as tmp:
        save_file(trainable_state(model), str(tmp / "trainable.safetensors"))
        tensors, groups = _optimizer_tensors(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        write_text(tmp / "ledger.jsonl", "".join(ledger_lines))
        write_json(tmp / "state.json", {"next_step": next_step, "fingerprint": fingerprint, "param_groups": groups})
        mark_done(tmp)


def checkpoint_fingerprint(config: Any, base_model: str, teacher_model: str | None, record_ids: list[str],
                           num_processes: int) -> dict:
    """What a checkpoint must have been written for to be resumed: the config hash (checkpoint fields at their
    defaults, shadow_models.config.RESUME_FIELDS), base, teacher, record ids in training order, processes."""
    return {"config": config.config_hash(), "base": base_model, "teacher": teacher_model, "records": list(record_ids),
            "num_processes": num_processes}


def resumable_step(ckpt: Path, fingerprint: dict, *, ignore: tuple[str, ...] = ()) -> int:
    """The step a complete checkpoint at `ckpt` resumes from when its fingerprint equals `fingerprint` (keys in
    `ignore` left out of the comparison), else 0. Reads state.json only (a resumed run's ETA,
    leakaudit.pipeline.training.training_left)."""
    found = complete_version(ckpt)  # the checkpoint, or the one a stop mid-replacement left aside
    if found is None:
        return 0
    state = read_json(found / "state.json")
    saved = {k: v for k, v in state["fingerprint"].items() if k not in ignore}
    return int(state["next_step"]) if saved == {k: v for k, v in fingerprint.items() if k not in ignore} else 0


def load_checkpoint(ckpt: Path, *, model: Any, optimizer: torch.optim.Optimizer, fingerprint: dict
                    ) -> tuple[int, list[str]] | None:
    """Restore weights and optimizer in place; returns (next_step, ledger lines), or None when there is no
    complete checkpoint for this exact run."""
    restore_previous(ckpt)
    if not resumable_step(ckpt, fingerprint):
        return None
    state = read_json(ckpt / "state.json")
    weights = load_file(str(ckpt / "trainable.safetensors"))
    params = dict(model.named_parameters())
    if set(weights) != {n for n, p in params.items() if p.requires_grad}:
        return None
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value.to(params[name].device))
    flat = load_file(str(ckpt / "optimizer.safetensors"))
    opt_state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        idx, name = key.split("/", 1)
        opt_state.setdefault(int(idx), {})[name] = value
    optimizer.load_state_dict({"state": opt_state, "param_groups": state["param_groups"]})
    lines = (ckpt / "ledger.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    return int(state["next_step"]), lines
