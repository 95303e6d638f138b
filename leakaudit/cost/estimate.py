"""The cost model of a study: per stage, its FLOPs (dense and decoding), tokens, decode steps, jobs and peak memory
per job (the package docstring states the model)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from leakaudit.cost.lengths import Lengths
from leakaudit.cost.shapes import ModelShape
from leakaudit.cost.workload import Workload, workload_from_config


STAGE_NAMES = ("teacher", "students", "signals")


@dataclass
class StageCost:
    """One stage: FLOPs split into dense work and decoding, the tokens decoded and the decode steps (one step = one
    token for a batch of rows), and its peak memory per job (bytes)."""

    dense_flops: float = 0.0
    decode_flops: float = 0.0
    decode_steps: float = 0.0
    jobs: int = 0
    """Jobs the stage runs (a model trained, a target sampled, a model scoring): each pays a load/start overhead."""
    tokens: dict[str, float] = field(default_factory=dict)
    peak_bytes: float = 0.0

    @property
    def flops(self) -> float:
        return self.dense_flops + self.decode_flops

    def add_tokens(self, kind: str, n: float) -> None:
        self.tokens[kind] = self.tokens.get(kind, 0.0) + n


@dataclass
class StudyCost:
    models: dict[str, int]
    """kind -> count of models trained (targets, null students, offline references, teacher)."""
    opd_steps: int
    stages: dict[str, StageCost]
    lengths: dict[str, Lengths]
    shape: ModelShape

    def to_dict(self) -> dict[str, Any]:
        return {"models": self.models, "opd_steps": self.opd_steps, "params": self.shape.params,
                "shape": asdict(self.shape), "lengths": {d: asdict(v) for d, v in self.lengths.items()},
                "stages": {s: {"flops": c.flops, "dense_flops": c.dense_flops, "decode_flops": c.decode_flops,
                               "decode_steps": c.decode_steps, "jobs": c.jobs, "tokens": c.tokens, "peak_gb": c.peak_bytes / 1e9}
                           for s, c in self.stages.items()}}


def study_cost(cfg: Any, shape: ModelShape, lengths: Mapping[str, Lengths],
               workload: Workload | None = None) -> StudyCost:
    """The cost of `workload` (default: the study config's own, workload_from_config) under the recipe of `cfg` (a
    StudyConfig) for a base model of `shape` (see the module docstring)."""
    w = workload if workload is not None else workload_from_config(cfg)
    tr, sig = cfg.training, cfg.signals
    n_mm = shape.matmul_params
    models: dict[str, int] = {}
    for _, role, _ in w.trained:
        models[role] = models.get(role, 0) + 1
    models["teacher"] = 1 if w.teacher_sft else 0
    stages = {s: StageCost() for s in STAGE_NAMES}
    g, g_s, k = tr.max_new_tokens, sig.sampling.max_new_tokens, sig.sampling.n_per_record
    t, s, q = stages["teacher"], stages["students"], stages["signals"]
    # teacher preparation: SFT on its records (context + the copied reference)
    for dom, n in w.teacher_sft.items():
        ln = lengths[dom]
        t.jobs = 1
        t.add_tokens("sft", cfg.teacher.prep.epochs * n * (ln.teacher_context + ln.reference))
    # students: each pass over its records samples a rollout, runs the teacher over it, updates on prompt + rollout
    steps_total = 0
    left = w.trained_left if w.trained_left is not None else [1.0] * len(w.trained)
    for (dom, _, r), f in zip(w.trained, left, strict=True):
        # f < 1: a resumed checkpoint holds the first (1 - f) of its steps; every step costs alike
        ln = lengths[dom]
        steps = tr.epochs * math.ceil(r / tr.batch_size) * f
        steps_total += steps
        visits = tr.epochs * r * f
        s.jobs += 1
        s.add_tokens("rollout_prefill", visits * ln.prompt)
        s.add_tokens("rollout", visits * g)
        s.add_tokens("teacher", f * r * ln.teacher_context * (1 if tr.teacher_prefix_cache else tr.epochs)
                     + visits * g)
        s.add_tokens("update", visits * (ln.prompt + g))
        s.decode_steps += steps * g
    # signals: each target samples k trajectories per candidate; the scorers score them and the fixed texts
    for dom, n_c in w.targets:
        ln = lengths[dom]
        q.add_tokens("sample_prefill", n_c * k * ln.prompt)
        q.add_tokens("sample", n_c * k * g_s)
        q.decode_steps += math.ceil(n_c * k / sig.sampling.batch_size) * g_s
    for dom, pairs in w.fresh_scored.items():
        ln = lengths[dom]
        q.add_tokens("score_fresh", pairs * ((ln.prompt + k * g_s) if sig.share_prefix else k * (ln.prompt + g_s)))
    for dom, pairs in w.fixed_scored.items():
        q.add_tokens("score_fixed", pairs * (lengths[dom].prompt + lengths[dom].reference))
    q.jobs = len(w.targets) + w.scoring_jobs
    t.dense_flops = 6 * n_mm * t.tokens.get("sft", 0)
    s.decode_flops = 2 * n_mm * s.tokens.get("rollout", 0)
    s.dense_flops = 2 * n_mm * (s.tokens.get("rollout_prefill", 0) + s.tokens.get("teacher", 0)) \
        + 6 * n_mm * s.tokens.get("update", 0)
    q.decode_flops = 2 * n_mm * q.tokens.get("sample", 0)
    q.dense_flops = 2 * n_mm * (q.tokens.get("sample_prefill", 0) + q.tokens.get("score_fresh", 0)
                                + q.tokens.get("score_fixed", 0))
    _peak_memory(cfg, shape, lengths, stages, max((r for _, _, r in w.trained), default=0))
    return StudyCost(models=models, opd_steps=round(steps_total), stages=stages, lengths=dict(lengths), shape=shape)


def _peak_memory(cfg: Any, shape: ModelShape, lengths: Mapping[str, Lengths], stages: dict[str, StageCost],
                 r: int) -> None:
    """Peak bytes per job of each stage (see the module docstring); the longest domain sets it."""
    n, tr, sig = shape.params, cfg.training, cfg.signals
    kv_bytes_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * (2 if tr.bf16_autocast else 4)
    act_per_token = 34 * shape.hidden * shape.layers
    prompt = max(v.prompt for v in lengths.values())
    context = max(v.teacher_context for v in lengths.values())
    reference = max(v.reference for v in lengths.values())
    micro = tr.micro_batch_size or tr.batch_size
    trainable = 16 * n if tr.lora_rank == 0 else 4 * n
    students = (trainable + 4 * n + (2 * n if tr.bf16_autocast and tr.rollout_bf16_copy else 0)
                + (r * context * kv_bytes_per_token if tr.teacher_prefix_cache else 0)
                + 4 * 4 * micro * tr.max_new_tokens * shape.vocab
                + micro * (prompt + tr.max_new_tokens) * act_per_token)
    stages["students"].peak_bytes = students
    prep = cfg.teacher.prep
    stages["teacher"].peak_bytes = (16 * n + 3 * 4 * prep.micro_batch_size * min(prep.max_length, context + reference)
                                    * shape.vocab + prep.micro_batch_size * prep.max_length * act_per_token
                                    ) if cfg.teacher.prepared else 0.0
    rows = sig.score_batch_size
    stages["signals"].peak_bytes = 4 * n + 3 * 4 * rows * max(sig.sampling.max_new_tokens, reference) * shape.vocab
