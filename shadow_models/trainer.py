"""train_student: on-policy distillation of one shadow student from a privileged teacher.

Own loop on accelerate rather than TRL's SDFTTrainer / DistillationTrainer, reusing TRL's loss helpers
(shadow_models.losses). Why: an auditor needs things those trainers do not expose or do differently —
(1) prompts must be the exact token ids of ``leakaudit.prompting`` (the signals stage scores with the same ids),
whereas the trainers re-render chat templates from strings; (2) a per-step ledger of *which record ids* were
trained, with the sampled completion lengths and the teacher-KL estimate; (3) record order and sampling seeded per
step, so a resumed run equals an uninterrupted one; (4) no pickle anywhere (transformers' Trainer checkpoints
optimizer/RNG state with torch.save); (5) one process trains many students with different precisions
(accelerate's mixed-precision state is a process-wide singleton). The loop still goes through
``Accelerator.prepare`` / ``backward`` / ``clip_grad_norm_``, so ``accelerate launch`` runs it data-parallel:
each step's records are split between processes, process 0 writes every file.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from accelerate.utils import gather_object

from leakaudit.data.records import Record
from leakaudit.errors import ConfigError
from leakaudit.io import checkpoint_dir, is_done, mark_done, previous_dir, staging_dir, write_json
from leakaudit.models import resolve_model_ref
from leakaudit.prompting import student_prompt_ids, teacher_prompt_ids

from shadow_models import optim
from leakaudit.padding import right_pad
from shadow_models.batching import completion_logits
from shadow_models.checkpoint import checkpoint_fingerprint, load_checkpoint, save_checkpoint
from shadow_models.config import OPDConfig
from shadow_models.losses import masked_sum, per_token_loss, sampled_logps
from shadow_models.modeling import check_same_vocab, load_frozen, save_student, setup_training, teacher_view
from shadow_models.plan import Step, plan_steps, record_seed, step_seed
from shadow_models.rollout_policy import BF16RolloutPolicy
from shadow_models.teacher_cache import TeacherPrefixCache
from leakaudit.envinfo import library_versions
from shadow_models.rollout import eos_token_ids, sample_completions


def check_records(records: Sequence[Record]) -> None:
    if not records:
        raise ConfigError("train_student needs at least one record")
    ids = [r.record_id for r in records]
    if len(set(ids)) != len(ids):
        raise ConfigError("duplicate record_id in the training records")


@contextlib.contextmanager
def main_process_staging(accelerator: Any, out_dir: Path) -> Iterator[Path | None]:
    """The staging directory on process 0 (None elsewhere): only process 0 writes files."""
    if accelerator.is_main_process:
        with staging_dir(out_dir) as tmp:
            yield tmp
    else:
        yield None


def train_student(base_model: str, records: list[Record], out_dir: Path, config: OPDConfig, *,
                  teacher_model: str | None = None, model_id: str = "", progress: bool = True,
                  trust_remote_code: bool = False, step_hook: Callable[[dict], None] | None = None,
                  epoch_hook: Callable[[int, Any], None] | None = None) -> Path:
    """Train one student by on-policy distillation on `records`; returns `out_dir` (at once if DONE exists).

    Per step: the student samples one completion per record of the batch from its current policy
    (temperature / top_p / max_new_tokens of `config`); the teacher (`teacher_model`, or the frozen base when None:
    self-distillation) scores every completion token with prompt + privileged in its context
    (`config.teacher_template`); the student is updated toward it per token on completion tokens only.
    Writes weights (or a LoRA adapter), meta.json, ledger.jsonl (one line per step) and DONE last, building in
    `<out_dir>.partial`; a crash leaves no `out_dir`, and with `config.save_checkpoints` the rerun resumes.
    `trust_remote_code` reaches the tokenizer, the student and the teacher loads (off by default).
    `step_hook(entry)`, if given, is called with each step's ledger entry once its line is written (the study's
    fault-injection point for tests of killed workers; progress views read the ledger file instead).
    `epoch_hook(epoch, model)`, if given, is called on the main process after the last step of each epoch (0-based;
    epochs finished before a resume are not called again) with the unwrapped student as it is then; it must leave
    the weights and the mode as it found them (experiments/pass_curve.py scores with it, under no_grad).
    """
    config.require_seed()  # None = "derive from a master seed": the caller (a study) must have done so
    out_dir = Path(out_dir)
    if is_done(out_dir):
        return out_dir
    check_records(records)
    started = time.time()
    config, accelerator, device, amp, tokenizer, student = setup_training(base_model, config,
                                                                          trust_remote_code=trust_remote_code)
    if accelerator.num_processes > 1 and config.rollout_seeding != "record":
        raise ConfigError(f"training.rollout_seeding={config.rollout_seeding!r} under {accelerator.num_processes} "
                          "processes: the rollouts would depend on the number of processes; set it to 'record'")
    if teacher_model is None and config.lora_rank > 0:
        teacher = None  # self-distillation with LoRA: the base under the student's disabled adapter
    else:
        teacher_ref = teacher_model if teacher_model is not None else base_model
        teacher = load_frozen(teacher_ref, device, trust_remote_code=trust_remote_code)
        check_same_vocab(student, teacher, tokenizer, teacher_ref)
    eos_ids = eos_token_ids(tokenizer, student)
    pad_id = int(tokenizer.pad_token_id)

    steps = plan_steps(len(records), config.epochs, config.batch_size, config.seed)
    optimizer, scheduler = optim.build_optimizer(
        student, learning_rate=config.learning_rate, weight_decay=config.weight_decay,
        warmup_steps=config.warmup_steps, schedule=config.lr_schedule, total_steps=len(steps),
        fused=config.fused_optimizer)
    fingerprint = checkpoint_fingerprint(config, base_model, teacher_model, [r.record_id for r in records],
                                         accelerator.num_processes)
    ckpt = checkpoint_dir(out_dir)
    start_step, ledger = 0, []
    if config.save_checkpoints:
        resumed = load_checkpoint(ckpt, model=student, optimizer=optimizer, fingerprint=fingerprint)
        if resumed is not None:
            start_step, ledger = resumed
            optim.fast_forward(scheduler, start_step)
    student, optimizer = accelerator.prepare(student, optimizer)
    # config.teacher_prefix_cache: the teacher's keys/values over each record's context, computed at its first step
    prefix_cache = TeacherPrefixCache() if config.teacher_prefix_cache else None
    # config.rollout_bf16_copy: rollouts from a bf16 copy of the (resumed) weights, refreshed after every update
    rollout_policy = (BF16RolloutPolicy(accelerator.unwrap_model(student))
                      if config.rollout_bf16_copy and config.bf16_autocast else None)

    with main_process_staging(accelerator, out_dir) as tmp:
        ledger_path = tmp / "ledger.jsonl" if tmp is not None else None
        if ledger_path is not None:
            ledger_path.write_text("".join(ledger), encoding="utf-8")
        bar = _progress(len(steps), start_step, progress and accelerator.is_main_process, model_id)
        for step in steps[start_step:]:
            entry = _train_step(step, records, config, accelerator, student, teacher, tokenizer, optimizer,
                                scheduler, amp=amp, eos_ids=eos_ids, pad_id=pad_id, prefix_cache=prefix_cache,
                                rollout_policy=rollout_policy)
            line = json.dumps(entry, sort_keys=True) + "\n"
            ledger.append(line)
            if ledger_path is not None:
                with open(ledger_path, "a", encoding="utf-8") as f:
                    f.write(line)
            if step_hook is not None:
                step_hook(entry)
            if epoch_hook is not None and accelerator.is_main_process and ends_epoch(steps, step):
                epoch_hook(step.epoch, accelerator.unwrap_model(student))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(kl=f"{entry['teacher_kl']:.3f}", loss=f"{entry['loss']:.3f}")
            done = step.index + 1
            if (config.save_checkpoints and accelerator.is_main_process and done < len(steps)
                    and done % config.checkpoint_every == 0):
                save_checkpoint(ckpt, model=accelerator.unwrap_model(student), optimizer=optimizer,
                                next_step=done, fingerprint=fingerprint, ledger_lines=ledger)
        if bar is not None:
            bar.close()
        if prefix_cache is not None:
            prefix_cache.clear()  # free it before saving; nothing after the last step uses it
        rollout_policy = None
        accelerator.wait_for_everyone()
        if tmp is not None:
            save_student(accelerator.unwrap_model(student), tokenizer, tmp)
            wall = round(time.time() - started, 3)
            write_json(tmp / "meta.json", _meta(base_model, teacher_model, model_id, config, records, steps,
                                                accelerator, wall, start_step, eos_ids))
            mark_done(tmp, {"wall_seconds": wall, "steps": len(steps)})
    if accelerator.is_main_process:
        for leftover in (ckpt, previous_dir(ckpt)):  # the checkpoint, and one a stop mid-replacement left aside
            if leftover.exists():
                shutil.rmtree(leftover)
    accelerator.wait_for_everyone()
    return out_dir


def _train_step(step: Step, records: Sequence[Record], config: OPDConfig, accelerator: Any, student: Any,
                teacher: Any | None, tokenizer: Any, optimizer: Any, scheduler: Any, *, amp: Any, eos_ids: list[int],
                pad_id: int, prefix_cache: TeacherPrefixCache | None = None,
                rollout_policy: BF16RolloutPolicy | None = None) -> dict:
    """Sample, score with the teacher, update the student once; returns the ledger entry.

    One decode call (shadow_models.rollout.sample_completions) samples the whole (local) batch, from
    `rollout_policy` when given (a bf16 copy of the student, refreshed after the update), else from the student
    under `amp`. The update then runs in micro-batches
    of `config.micro_batch_size` records grouped by prompt length (least padding); each micro-batch's loss is its
    per-token loss summed over its completion tokens divided by the batch's completion tokens, so the accumulated
    gradient is the batch's token mean, as in one pass, up to float rounding. With `prefix_cache` the teacher runs
    over the completions only, on top of its cached contexts (same logits, to float rounding)."""
    t0 = time.time()
    batch = [records[i] for i in step.positions]
    with accelerator.split_between_processes(list(range(len(batch)))) as mine:
        mine = list(mine)  # this process's positions in the batch: a contiguous slice, in order
    local = [batch[i] for i in mine]
    lr = float(scheduler.get_last_lr()[0])
    completions: list[list[int]] = []
    if local:
        s_prompts = [student_prompt_ids(tokenizer, r) for r in local]
        t_prompts = [teacher_prompt_ids(tokenizer, r, config.teacher_template) for r in local]
        sampler = rollout_policy.model if rollout_policy is not None else accelerator.unwrap_model(student)
        row_seeds = ([record_seed(config.seed, step.index, i) for i in mine]
                     if config.rollout_seeding == "record" else None)
        completions = sample_completions(
            sampler, s_prompts, max_new_tokens=config.max_new_tokens,
            temperature=config.temperature, top_p=config.top_p, eos_ids=eos_ids, pad_id=pad_id,
            seed=step_seed(config.seed, step.index, accelerator.process_index),
            autocast=None if rollout_policy is not None else amp, decoder=config.rollout_decoder,
            row_seeds=row_seeds)
    lengths = [len(c) for c in completions]
    # the batch's token mean over every process: each process divides by the global count and scales by the number
    # of processes, which the gradient all-reduce averages over (one process: its own count, scale 1, as before)
    n_batch = max(int(accelerator.reduce(torch.tensor([sum(lengths)], device=accelerator.device), "sum").item()), 1)
    scale = accelerator.num_processes
    if local:
        groups = micro_batches([len(p) + n for p, n in zip(s_prompts, lengths)], config.micro_batch_size)
        loss_sum, kl_sum = 0.0, 0.0
        for g, rows in enumerate(groups):
            sync = contextlib.nullcontext() if g == len(groups) - 1 else accelerator.no_sync(student)
            with sync:
                part_loss, part_kl = _update_part(
                    [s_prompts[i] for i in rows], [t_prompts[i] for i in rows], [completions[i] for i in rows],
                    n_batch, config, accelerator, student, teacher, amp=amp, pad_id=pad_id, prefix_cache=prefix_cache,
                    scale=scale)
            loss_sum += part_loss
            kl_sum += part_kl
    else:  # more processes than records in this (last) batch: join the gradient all-reduce with zeros
        accelerator.backward(optim.zero_loss(student, accelerator.device))
        loss_sum, kl_sum, lengths = 0.0, 0.0, []
    grad_norm = optim.apply_update(accelerator, student, optimizer, scheduler, config.max_grad_norm)
    if rollout_policy is not None:
        rollout_policy.sync(accelerator.unwrap_model(student))
    gathered = gather_object([(lengths, kl_sum, loss_sum)])
    all_lengths = [n for part in gathered for n in part[0]]
    n_tokens = max(sum(all_lengths), 1)
    return {
        "step": step.index,
        "epoch": step.epoch,
        "record_ids": [r.record_id for r in batch],
        "teacher_kl": sum(part[1] for part in gathered) / n_tokens,
        "loss": sum(part[2] for part in gathered) / n_tokens,
        "completion_lengths": all_lengths,
        "completion_tokens": sum(all_lengths),
        "lr": lr,
        "grad_norm": grad_norm,
        "seconds": round(time.time() - t0, 4),
    }


def ends_epoch(steps: Sequence[Step], step: Step) -> bool:
    """Whether `step` is the last of its epoch in `steps` (the whole plan, in order)."""
    return step.index + 1 == len(steps) or steps[step.index + 1].epoch != step.epoch


def micro_batches(lengths: Sequence[int], size: int | None) -> list[list[int]]:
    """Row indices in groups of at most `size` (None: one group of all, in order), rows sorted by `lengths`
    (longest first; ties by index) so each group pads to similar lengths. Deterministic."""
    if size is None or size >= len(lengths):
        return [list(range(len(lengths)))]
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i:i + size] for i in range(0, len(order), size)]


def _update_part(s_prompts: list, t_prompts: list, completions: list[list[int]], n_tokens: int, config: OPDConfig,
                 accelerator: Any, student: Any, teacher: Any | None, *, amp: Any, pad_id: int,
                 prefix_cache: TeacherPrefixCache | None, scale: int = 1) -> tuple[float, float]:
    """Forward, loss and backward of one micro-batch; the loss is summed over its completion tokens, divided by
    `n_tokens` (the whole batch's, over every process) and multiplied by `scale` (the number of processes, whose
    gradients the all-reduce averages). Returns (sum of per-token losses, sum of per-token log p_s - log p_t)."""
    comp_ids, comp_mask = right_pad(completions, pad_id, accelerator.device)
    with amp:
        s_logits = completion_logits(student, s_prompts, comp_ids, comp_mask, pad_id)
    with torch.no_grad(), amp, teacher_view(teacher, accelerator.unwrap_model(student)) as scorer:
        if prefix_cache is not None:
            t_logits = prefix_cache.logits(scorer, t_prompts, comp_ids, comp_mask)
        else:
            t_logits = completion_logits(scorer, t_prompts, comp_ids, comp_mask, pad_id)
    tok_loss = per_token_loss(s_logits, t_logits, comp_ids, loss=config.loss, beta=config.beta, topk=config.topk)
    with torch.no_grad():
        gap = sampled_logps(s_logits.detach().float(), comp_ids) - sampled_logps(t_logits.float(), comp_ids)
        kl_sum = float((gap * comp_mask).sum())
    del t_logits, gap  # the teacher's [b, C, V] logits are not needed by the backward
    loss = masked_sum(tok_loss, comp_mask) / n_tokens
    del tok_loss
    accelerator.backward(loss if scale == 1 else loss * scale)
    return float(loss.detach()) * n_tokens, kl_sum


def _progress(total: int, initial: int, enabled: bool, model_id: str) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=f"OPD {model_id}".strip(), unit="step")


def _meta(base_model: str, teacher_model: str | None, model_id: str, config: OPDConfig, records: Sequence[Record],
          steps: list[Step], accelerator: Any, wall: float, start_step: int, eos_ids: list[int]) -> dict:
    return {
        "kind": "opd_student",
        "model_id": model_id,
        "base_model": base_model,
        "base_model_resolved": resolve_model_ref(base_model),
        "teacher_model": teacher_model,
        "teacher": "self-distillation (frozen base)" if teacher_model is None else teacher_model,
        "teacher_model_resolved": resolve_model_ref(teacher_model) if teacher_model is not None else None,
        "loss": config.loss,
        "config": config.to_dict(),
        "config_hash": config.config_hash(),
        "seed": config.seed,
        "teacher_template": config.teacher_template,
        "sampling": {"temperature": config.temperature, "top_p": config.top_p, "top_k": 0,
                     "max_new_tokens": config.max_new_tokens, "eos_token_ids": eos_ids},
        "adapter": config.lora_rank > 0,
        "record_ids": [r.record_id for r in records],
        "n_records": len(records),
        "steps": len(steps),
        "epochs": config.epochs,
        "resumed_from_step": start_step,
        "wall_seconds": wall,
        "device": str(accelerator.device),
        "num_processes": accelerator.num_processes,
        "versions": library_versions(),
    }
