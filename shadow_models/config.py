"""Configuration dataclasses for on-policy distillation (OPDConfig), teacher preparation (TeacherPrepConfig) and the
study config's choice of teacher (TeacherConfig, its `teacher` section).

Every field has a docstring and a range check in ``__post_init__`` (raising ``leakaudit.errors.ConfigError``),
imitating TRL's ``*_config.py``. OPDConfig and TeacherPrepConfig are plain, JSON-serialisable dataclasses:
``dataclasses.asdict`` goes straight into ``meta.json``. ``__pydantic_config__`` (leakaudit.config_section.FORBID)
lets leakaudit.config validate them with pydantic (types, and unknown keys rejected) when a study config is loaded;
constructing them directly is unchanged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields

from leakaudit.config_section import FORBID, Checked
from leakaudit.errors import ConfigError
from leakaudit.precision import valid_bf16_setting
from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE

LOSSES = ("sampled_rkl", "full_rkl", "jsd")
ROLLOUT_DECODERS = ("loop", "generate")
ROLLOUT_SEEDINGS = ("step", "record")
LR_SCHEDULES = ("constant", "linear", "cosine")
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _check(cond: bool, name: str, value: object, need: str) -> None:
    if not cond:
        raise ConfigError(f"{name}={value!r}: must be {need}")


@dataclass(frozen=True)
class _OptimFields:
    """Fields shared by OPD and teacher SFT: optimisation, LoRA, precision, seed, teacher template."""

    __pydantic_config__ = FORBID  # not a field: read by pydantic.TypeAdapter only

    epochs: int = 1
    """Passes over the records; each epoch visits every record once, in an order shuffled from `seed`. >= 1."""
    batch_size: int = 8
    """Records per optimizer step (global, summed over processes under `accelerate launch`). >= 1."""
    learning_rate: float = 1e-5
    """Peak AdamW learning rate. > 0 and <= 1."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay. >= 0."""
    warmup_steps: int = 0
    """Linear warm-up steps from 0 to `learning_rate`. >= 0."""
    lr_schedule: str = "constant"
    """After warm-up: 'constant', 'linear' (decay to 0 at the last step) or 'cosine'."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables clipping. >= 0."""
    lora_rank: int = 0
    """0 = full fine-tuning; > 0 = PEFT LoRA of this rank (the adapter is what gets saved)."""
    lora_alpha: int = 32
    """LoRA scaling numerator (effective scale lora_alpha / lora_rank). > 0."""
    lora_dropout: float = 0.0
    """LoRA dropout probability, in [0, 1)."""
    lora_target_modules: tuple[str, ...] = DEFAULT_LORA_TARGETS
    """Module names LoRA adapts (Llama-style projection names by default). Non-empty."""
    bf16_autocast: bool | str = "auto"
    """Run forward passes and sampling under bf16 autocast; master weights and AdamW state stay fp32. 'auto' = on
    where bf16 matmuls are native on the training device, off (fp32) where they are emulated and ~8x slower
    (leakaudit.precision; the trainer records what it ran with in meta.json)."""
    fused_optimizer: bool = True
    """torch's fused AdamW kernel (one pass per parameter) instead of the multi-tensor one: the same update up to
    float rounding; the optimizer step of a 135M student 0.54 -> 0.15 s at one thread (bench/bench_opd_step.py)."""
    seed: int | None = None
    """Seeds model init (LoRA), record order, and every sampling step. >= 0, or None = not chosen yet: a study
    derives it from its master seed (per student for training); the trainers refuse None (`require_seed`)."""
    teacher_template: str = DEFAULT_TEACHER_TEMPLATE
    """How the teacher sees a record: must contain '{prompt}' and '{privileged}'. Saved in meta.json."""

    def _check_common(self) -> None:
        _check(isinstance(self.epochs, int) and self.epochs >= 1, "epochs", self.epochs, "an int >= 1")
        _check(isinstance(self.batch_size, int) and self.batch_size >= 1, "batch_size", self.batch_size,
               "an int >= 1")
        _check(0 < self.learning_rate <= 1, "learning_rate", self.learning_rate, "in (0, 1]")
        _check(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        _check(isinstance(self.warmup_steps, int) and self.warmup_steps >= 0, "warmup_steps", self.warmup_steps,
               "an int >= 0")
        _check(self.lr_schedule in LR_SCHEDULES, "lr_schedule", self.lr_schedule, f"one of {LR_SCHEDULES}")
        _check(self.max_grad_norm >= 0, "max_grad_norm", self.max_grad_norm, ">= 0 (0 = no clipping)")
        _check(isinstance(self.lora_rank, int) and self.lora_rank >= 0, "lora_rank", self.lora_rank, "an int >= 0")
        _check(self.lora_alpha > 0, "lora_alpha", self.lora_alpha, "> 0")
        _check(0 <= self.lora_dropout < 1, "lora_dropout", self.lora_dropout, "in [0, 1)")
        _check(len(self.lora_target_modules) > 0, "lora_target_modules", self.lora_target_modules, "non-empty")
        _check(self.seed is None or (isinstance(self.seed, int) and not isinstance(self.seed, bool)
                                     and self.seed >= 0), "seed", self.seed, "an int >= 0 or None")
        _check(valid_bf16_setting(self.bf16_autocast), "bf16_autocast", self.bf16_autocast, "true, false or 'auto'")
        _check("{prompt}" in self.teacher_template and "{privileged}" in self.teacher_template,
               "teacher_template", self.teacher_template[:40] + "...", "a template with {prompt} and {privileged}")
        try:
            self.teacher_template.format(prompt="", privileged="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"teacher_template: cannot be formatted with prompt/privileged only ({exc})") from exc

    def require_seed(self) -> int:
        """The seed, or ConfigError when it is None (a caller must choose one: a study derives it)."""
        if self.seed is None:
            raise ConfigError(f"{type(self).__name__}.seed is None: pass an int seed (a study derives one from its "
                              "master `seed`)")
        return self.seed

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lora_target_modules"] = list(self.lora_target_modules)
        return d

    def hashed_dict(self) -> dict:
        """`to_dict` as the hashes read it: the RESUME_FIELDS at their defaults (they say how a run survives a stop,
        not what it computes)."""
        return {**self.to_dict(), **resume_field_defaults(type(self))}

    def config_hash(self) -> str:
        """Short sha256 of `hashed_dict`: a checkpoint is only resumed under a config that trains the same student
        (turning checkpoints on, or changing their interval, keeps it)."""
        blob = json.dumps(self.hashed_dict(), sort_keys=True).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()[:16]


RESUME_FIELDS = ("save_checkpoints", "checkpoint_every")
"""OPDConfig fields that say how training survives being stopped, not what it trains: a student resumed from its
checkpoint has the weights of one never stopped (tests/test_shadow_models.py). Every hash (OPDConfig.config_hash,
leakaudit.config.StudyConfig.hash) reads them at their defaults, so a run stopped without checkpoints can be
resumed with them on."""


def resume_field_defaults(cls: type) -> dict:
    """{field: default} of the RESUME_FIELDS that `cls` has (none for TeacherPrepConfig)."""
    return {f.name: f.default for f in fields(cls) if f.name in RESUME_FIELDS}


@dataclass(frozen=True)
class OPDConfig(_OptimFields):
    """On-policy distillation of one student (see shadow_models.trainer.train_student)."""

    loss: str = "sampled_rkl"
    """'sampled_rkl' (policy gradient with per-token reward log p_t(y) - log p_s(y), Thinking Machines' OPD),
    'full_rkl' (full-vocabulary reverse KL), or 'jsd' (generalized JSD with `beta`, as TRL's GKD)."""
    beta: float = 0.5
    """JSD interpolation (loss='jsd' only): 0 = forward KL(teacher||student), 1 = reverse KL. In [0, 1]."""
    topk: int | None = None
    """loss='jsd' only: restrict the divergence to the teacher's top-k tokens (renormalised). None = full vocab."""
    max_new_tokens: int = 64
    """Tokens the student samples per prompt per step (completion stops earlier at EOS). >= 1."""
    temperature: float = 1.0
    """Student sampling temperature. > 0."""
    top_p: float = 1.0
    """Student nucleus sampling threshold, in (0, 1]. (top_k is always disabled.)"""
    save_checkpoints: bool = False
    """Keep a resumable checkpoint in `<out_dir>.ckpt/` every `checkpoint_every` steps (weights, AdamW state
    and ledger, safetensors + JSON); an interrupted run resumes from it with the weights it would have had
    uninterrupted. Deleted when the student is DONE. Not part of the config hash: turn it on to resume a stopped run."""
    checkpoint_every: int = 10
    """Steps between checkpoints when save_checkpoints. >= 1."""
    teacher_prefix_cache: bool = True
    """Compute the frozen teacher's keys/values over each record's teacher context (prompt + privileged) once per
    train_student call and, at every step, run the teacher only over the completion on top of them
    (shadow_models.teacher_cache); the teacher logits equal the full forward's to float rounding (fp32: max
    |d log p| 2.2e-5 on 135M). The teacher forward of a default-preset step is 4.4x faster in bf16
    (bench/results/teacher_cache.json). Memory: the cache of every record trained (~13 MB per 400-token context
    on 135M in bf16), held until train_student returns."""
    rollout_bf16_copy: bool = True
    """Under bf16_autocast: sample the rollouts from a bf16 copy of the student (LoRA merged in), refreshed after
    every update (shadow_models.rollout_policy), instead of from the fp32 student under autocast. Both are bf16
    approximations of the current policy; the update scores the completions with the student as before. Memory:
    2 bytes per parameter. Ignored in fp32 training."""
    rollout_decoder: str = "loop"
    """How rollouts are decoded: 'loop' (leakaudit.signals.decode's loop: generate's own forwards and draw, the
    prompt's last position sent to the LM head by index) or 'generate' (transformers' generate, the path before
    the speed work). The same tokens (tests/test_decode.py); 'loop' samples a rollout 1.33x faster on CPU
    (bench/results/decode.json) because generate's prefill copies the bf16 LM head once per row there."""
    rollout_seeding: str = "step"
    """Where a rollout's random draws come from: 'step' = one torch RNG stream per step and process (seeded by
    shadow_models.plan.step_seed), so the tokens depend on how a batch is split over processes; 'record' = one
    stream per record of the step (plan.record_seed: seed, step, position in the batch), so a student trained under
    `accelerate launch` on N processes draws the same rollouts as on one (the multi-process trainer requires it).
    'record' needs rollout_decoder 'loop'."""
    micro_batch_size: int | None = None
    """Records per forward/backward of the update (gradients accumulated; each micro-batch's loss is summed over its
    tokens and divided by the batch's, so the update is the batch's token mean up to float rounding); rows are
    grouped by length, so less padding. Bounds the activations held for the backward. None = the whole batch in
    one pass. >= 1 or None."""

    def __post_init__(self) -> None:
        self._check_common()
        _check(self.loss in LOSSES, "loss", self.loss, f"one of {LOSSES}")
        _check(0 <= self.beta <= 1, "beta", self.beta, "in [0, 1]")
        _check(self.topk is None or (isinstance(self.topk, int) and self.topk >= 1), "topk", self.topk,
               "None or an int >= 1")
        if self.topk is not None and self.loss != "jsd":
            raise ConfigError(f"topk={self.topk}: only used with loss='jsd' (got loss={self.loss!r})")
        _check(isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1, "max_new_tokens",
               self.max_new_tokens, "an int >= 1")
        _check(self.temperature > 0, "temperature", self.temperature, "> 0")
        _check(self.rollout_decoder in ROLLOUT_DECODERS, "rollout_decoder", self.rollout_decoder,
               f"one of {ROLLOUT_DECODERS}")
        _check(0 < self.top_p <= 1, "top_p", self.top_p, "in (0, 1]")
        _check(self.rollout_seeding in ROLLOUT_SEEDINGS, "rollout_seeding", self.rollout_seeding,
               f"one of {ROLLOUT_SEEDINGS}")
        if self.rollout_seeding == "record" and self.rollout_decoder != "loop":
            raise ConfigError(f"rollout_seeding='record': needs rollout_decoder='loop' (generate draws from one "
                              f"stream for the whole batch), got {self.rollout_decoder!r}")
        _check(isinstance(self.checkpoint_every, int) and self.checkpoint_every >= 1, "checkpoint_every",
               self.checkpoint_every, "an int >= 1")
        _check(self.micro_batch_size is None or (isinstance(self.micro_batch_size, int)
                                                 and not isinstance(self.micro_batch_size, bool)
                                                 and self.micro_batch_size >= 1),
               "micro_batch_size", self.micro_batch_size, "None or an int >= 1")


@dataclass(frozen=True)
class TeacherPrepConfig(_OptimFields):
    """Supervised fine-tuning of a teacher that answers from the reference in its context
    (see shadow_models.teacher_prep.prepare_teacher)."""

    epochs: int = 3
    """Passes over the population records. >= 1."""
    learning_rate: float = 5e-5
    """Peak AdamW learning rate. > 0 and <= 1."""
    max_length: int = 1024
    """Longest teacher-prompt + target sequence; longer targets are truncated (prompt kept). >= 8."""
    micro_batch_size: int = 2
    """Sequences per forward/backward pass; gradients of a step's micro-batches are accumulated, and the loss is
    the mean over all target tokens of the step, so the update does not depend on it (up to float rounding).
    Memory does: one SFT step of 8 sequences of ~1000 tokens on SmolLM2-135M peaks at 13.0 GB resident in a
    single pass, 4.8 GB in micro-batches of 2, 3.4 GB one at a time, and is no slower (18 vs 25 s;
    bench/bench_teacher_memory.py). >= 1."""

    def __post_init__(self) -> None:
        self._check_common()
        _check(isinstance(self.micro_batch_size, int) and self.micro_batch_size >= 1, "micro_batch_size",
               self.micro_batch_size, "an int >= 1")
        _check(isinstance(self.max_length, int) and self.max_length >= 8, "max_length", self.max_length,
               "an int >= 8")


PREPARED_TEACHERS = {"prepared": "privileged", "restated": "restated", "plan": "plan"}
"""teacher.kind values for a teacher the run prepares itself -> its SFT target (shadow_models.teacher_prep)."""


@dataclass
class TeacherConfig:
    """The study config's `teacher` section: which model scores the students' completions with the privileged text
    in its context."""

    __pydantic_config__ = FORBID

    kind: str = "self"
    """'self' = the frozen base student; 'prepared' = the base after SFT on population and teacher-only records
    (never candidates) to copy the privileged text from its context (the copying teacher); 'restated' = the same
    SFT with the record's restatement as the target (leakaudit.data.restate: an equivalent code body with locals
    renamed, the worked solution answer-first and reworded, the deciding findings in another template than the
    note), a teacher that answers *from* its context in another surface form than the privileged text; 'plan' =
    the same with a code record's body told as a numbered English plan as the target (leakaudit.data.code_plan;
    records of other domains get their restatement), a teacher that never hands the program over; records no
    rule restates are left out of its SFT set (counted in its meta.json). All three are cached per run under
    models/_teacher. Or a model reference (hub id / directory). Every run records how literal its teacher is
    (teacher_literalness.json, sample_literalness.json; leakaudit.literalness)."""
    prep: Checked[TeacherPrepConfig] = field(default_factory=TeacherPrepConfig)
    """shadow_models.TeacherPrepConfig, used when kind is 'prepared', 'restated' or 'plan'. Its seed: null = derived by
    the study from the master `seed`; an int is used as is."""

    def __post_init__(self) -> None:
        if not self.kind.strip():
            raise ConfigError("teacher.kind: must be 'self', 'prepared', 'restated', 'plan' or a model reference, got ''")

    @property
    def prepared(self) -> bool:
        """True when the run prepares its own teacher (kind 'prepared', 'restated' or 'plan')."""
        return self.kind in PREPARED_TEACHERS

    @property
    def sft_target(self) -> str | None:
        """What a prepared teacher is fine-tuned to write (shadow_models.teacher_prep.SFT_TARGETS), else None."""
        return PREPARED_TEACHERS.get(self.kind)
