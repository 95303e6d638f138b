"""What a study costs before it runs (`leakaudit run-study --dry-run`): models, OPD steps, tokens, FLOPs, peak memory
per job and wall time, on this machine (from rates measured on an earlier run) and on a named GPU class.

The model, stated so it can be checked (bench/cost_check.py compares it with stored runs' stage times):
- tokens: every rollout and sampled trajectory is taken to run to its token cap (an upper bound: EOS ends earlier);
  prompt, teacher-context and reference-text lengths are the records' own means when the records are given, else
  the data section's token budgets (upper bounds).
- FLOPs: 2 N per token forward, 6 N forward + backward (N = the model's matmul parameters, LM head included;
  attention's quadratic term left out: contexts here are under 2k tokens).
- students: per student, each pass over its records samples a rollout (prefill + decode), runs the teacher over the
  completion (its context once per record with the prefix cache) and updates on prompt + completion.
- signals: each target samples n_per_record trajectories per candidate; each trajectory is scored by the target,
  the base, the record's matched OUT references and every offline reference (the prompt once per record
  with share_prefix); every model scores its domain's candidates + population as fixed texts (prompt + reference).
- this machine: seconds = FLOPs / the FLOP rate one earlier run of the same stage achieved here (CostRates: a
  stored run's stage times over its FLOPs under this model); this folds decode's memory-boundness, padding and
  the execution settings of that run into one number per stage.
- a GPU: dense work (prefill, teacher, update, scoring) at `dense_utilisation` of the card's bf16 peak; decoding
  one token for a batch of rows reads the bf16 weights once, at `bandwidth_utilisation` of its memory bandwidth,
  and takes at least its kernel launches (KERNEL_LAUNCH_S_PER_LAYER per layer).
- peak memory per job: fp32 weights + grads + AdamW (16 N bytes), the fp32 teacher (4 N), the bf16 rollout copy,
  the teacher prefix cache, the micro-batch's logits (student, teacher, their softmaxes and the gradient: 4 copies
  of [micro, new tokens, vocab] fp32) and the layer activations (34 H bytes per token per layer, bf16).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

STAGE_NAMES = ("teacher", "students", "signals")


@dataclass(frozen=True)
class ModelShape:
    """What the cost model needs of a causal LM (read from its config.json)."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        """All parameters (embedding, layers, head unless tied); biases and norms left out."""
        kv = self.kv_heads * self.head_dim
        layer = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def matmul_params(self) -> int:
        """Parameters a token's forward multiplies by: the layers and the LM head (not the embedding lookup)."""
        kv = self.kv_heads * self.head_dim
        layer = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate
        return self.layers * layer + self.vocab * self.hidden

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ModelShape":
        heads = int(cfg["num_attention_heads"])
        return cls(hidden=int(cfg["hidden_size"]), layers=int(cfg["num_hidden_layers"]),
                   intermediate=int(cfg["intermediate_size"]), heads=heads,
                   kv_heads=int(cfg.get("num_key_value_heads") or heads), vocab=int(cfg["vocab_size"]),
                   tied=bool(cfg.get("tie_word_embeddings", False)))


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


@dataclass(frozen=True)
class Lengths:
    """Mean token lengths per record of one domain: the student prompt, the teacher's context (prompt + privileged in
    the template) and the reference text scored as a fixed text; `measured` = from the records, else budgets."""

    prompt: float
    teacher_context: float
    reference: float
    measured: bool


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


def budget_lengths(cfg: Any) -> dict[str, Lengths]:
    """Upper bounds from the token budgets, for every domain (no records needed)."""
    d = cfg.data
    return {dom: Lengths(d.max_prompt_tokens, d.max_prompt_tokens + d.max_privileged_tokens, d.max_privileged_tokens,
                         False) for dom in d.domains}


def measured_lengths(records: Sequence[Any], tokenizer: Any, teacher_template: str) -> dict[str, Lengths]:
    """Mean lengths per domain of `records`, with the token ids the stages use (leakaudit.prompting)."""
    from leakaudit.prompting import reference_text_ids, student_prompt_ids, teacher_prompt_ids

    sums: dict[str, list[float]] = {}
    for r in records:
        s = sums.setdefault(r.domain, [0.0, 0.0, 0.0, 0.0])
        s[0] += len(student_prompt_ids(tokenizer, r))
        s[1] += len(teacher_prompt_ids(tokenizer, r, teacher_template))
        s[2] += len(reference_text_ids(tokenizer, r))
        s[3] += 1
    return {d: Lengths(p / n, t / n, a / n, True) for d, (p, t, a, n) in sums.items()}


@dataclass
class Workload:
    """What a run trains and scores, by domain (from the config alone, or from a prepared run's plan)."""

    trained: list[tuple[str, str, int]]
    """(domain, role, records it trains on) per model trained."""
    targets: list[tuple[str, int]]
    """(domain, candidates sampled) per target (null students included)."""
    fresh_scored: dict[str, float]
    """domain -> (model, record) pairs scoring trajectories, summed over targets."""
    fixed_scored: dict[str, int]
    """domain -> (model, record) pairs scoring fixed texts (each model its domain's candidates + population)."""
    scoring_jobs: int
    teacher_sft: dict[str, int]
    """domain -> records the prepared teacher fine-tunes on (empty: no prepared teacher)."""


def workload_from_config(cfg: Any) -> Workload:
    """The workload of a study from its config alone (the keep-matrix design: what leakaudit.membership plans)."""
    from leakaudit.membership import OFFLINE

    data, plan = cfg.data, cfg.plan
    half = data.n_candidates // 2
    n_null = plan.n_null_students if plan.null_student else 0
    k_match = plan.n_matched_references or plan.n_students // 2 - 1
    trained, targets, fresh, fixed, sft = [], [], {}, {}, {}
    for dom in data.domains:
        roles = [("student", plan.n_students), ("null", n_null), (OFFLINE, plan.n_offline_references)]
        trained += [(dom, role, half + data.n_background) for role, n in roles for _ in range(n)]
        targets += [(dom, data.n_candidates)] * (plan.n_students + n_null)
        # each trajectory: the target, the base, its k matched OUT references, every offline reference
        fresh[dom] = (plan.n_students + n_null) * data.n_candidates * (2 + k_match + plan.n_offline_references)
        n_models = plan.n_students + n_null + plan.n_offline_references
        fixed[dom] = (n_models + 1) * (data.n_candidates + data.n_population)
        if cfg.teacher.prepared:
            sft[dom] = data.n_population + data.n_teacher_records
    n_trained = len(trained)
    return Workload(trained, targets, fresh, fixed, n_trained + 1, sft)


def workload_from_study(study: Any) -> Workload:
    """The workload of a prepared leakaudit.study.Study (a study or an audit), read off its membership plan."""
    from leakaudit.assemble import BASE_ID

    plan = study.plan()
    trained = [(plan.models[m]["domain"], plan.models[m]["role"], len(plan.members(m))) for m in study.trained_models()]
    views = plan.views()
    targets = [(v.domain, len(plan.candidates[v.domain])) for v in views]
    fresh: dict[str, float] = {}
    for v in views:
        for _, ids in study.fresh_scorers([v.target])[v.target].items():
            fresh[v.domain] = fresh.get(v.domain, 0) + (len(plan.candidates[v.domain]) if ids is None else len(ids))
    fixed: dict[str, int] = {}
    for m in [BASE_ID, *plan.models]:
        for d in (sorted(plan.candidates) if m == BASE_ID else [plan.models[m]["domain"]]):
            fixed[d] = fixed.get(d, 0) + len(plan.candidates[d]) + len(plan.population[d])
    sft: dict[str, int] = {}
    if study.cfg.teacher.prepared and not study.is_audit:
        for r in study.teacher_sft_records()[0]:
            sft[r.domain] = sft.get(r.domain, 0) + 1
    return Workload(trained, targets, fresh, fixed, len(plan.models) + 1, sft)


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
    for dom, _, r in w.trained:
        ln = lengths[dom]
        steps = tr.epochs * math.ceil(r / tr.batch_size)
        steps_total += steps
        visits = tr.epochs * r
        s.jobs += 1
        s.add_tokens("rollout_prefill", visits * ln.prompt)
        s.add_tokens("rollout", visits * g)
        s.add_tokens("teacher", r * ln.teacher_context * (1 if tr.teacher_prefix_cache else tr.epochs) + visits * g)
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
    return StudyCost(models=models, opd_steps=steps_total, stages=stages, lengths=dict(lengths), shape=shape)


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


@dataclass(frozen=True)
class CostRates:
    """Per stage, the FLOP rate a machine achieved and the seconds each job cost besides its FLOPs (loading models,
    starting a worker), fitted on earlier runs' stage times (`fit_rates`)."""

    machine: str
    source: str
    rates: dict[str, float]
    overhead_s: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stored_rates_path() -> Path:
    """The rates shipped with leakaudit (one entry per machine class; bench/cost_check.py writes them)."""
    return Path(__file__).with_name("cost_rates.json")


def read_rates(path: str | Path | None = None) -> list[CostRates]:
    """Every stored rate set (an empty list when there is no file)."""
    p = Path(path) if path is not None else stored_rates_path()
    if not p.is_file():
        return []
    return [CostRates(machine=d["machine"], source=d["source"], rates={k: float(v) for k, v in d["rates"].items()},
                      overhead_s={k: float(v) for k, v in d.get("overhead_s", {}).items()})
            for d in json.loads(p.read_text(encoding="utf-8"))["machines"]]


def write_rates(rates: CostRates, path: str | Path | None = None) -> None:
    """Store `rates`, replacing the entry of the same machine class."""
    p = Path(path) if path is not None else stored_rates_path()
    kept = [r for r in read_rates(p) if r.machine != rates.machine]
    doc = {"about": "per-stage FLOP rates and per-job overheads of machine classes, fitted on stored runs' stage times "
                    "by bench/cost_check.py (leakaudit.cost)",
           "machines": [r.to_dict() for r in sorted([*kept, rates], key=lambda r: r.machine)]}
    p.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def fit_rates(costs: Sequence[StudyCost], times: Sequence[Mapping[str, float]], *, machine: str,
              source: str) -> CostRates:
    """Per stage, seconds = FLOPs / rate + jobs * overhead, solved on two runs (least squares on more; a single run,
    or two that cannot separate the terms, gives the rate alone). An overhead that comes out negative is set to 0
    and the rate refitted."""
    import numpy as np

    rates, overhead = {}, {}
    for stage in STAGE_NAMES:
        rows = [(c.stages[stage].flops, c.stages[stage].jobs, t[stage]) for c, t in zip(costs, times)
                if c.stages[stage].flops and t.get(stage)]
        if not rows:
            continue
        a = np.array([[f, j] for f, j, _ in rows], dtype=float)
        y = np.array([t for _, _, t in rows], dtype=float)
        inv_rate, per_job = 0.0, 0.0
        if len(rows) >= 2 and np.linalg.matrix_rank(a) == 2:
            inv_rate, per_job = np.linalg.lstsq(a, y, rcond=None)[0]
        if per_job <= 0 or inv_rate <= 0:
            inv_rate, per_job = float(y.sum() / a[:, 0].sum()), 0.0
        rates[stage], overhead[stage] = 1.0 / float(inv_rate), float(per_job)
    return CostRates(machine=machine, source=source, rates=rates, overhead_s=overhead)


def seconds_here(cost: StudyCost, rates: CostRates) -> dict[str, float]:
    """Stage -> estimated seconds on the machine `rates` were measured on."""
    return {s: (c.flops / rates.rates[s] + c.jobs * rates.overhead_s.get(s, 0.0)
                if c.flops and rates.rates.get(s) else 0.0) for s, c in cost.stages.items()}


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


def model_shape(ref: str, *, trust_remote_code: bool = False) -> ModelShape:
    """The shape of a model reference (offline name, directory or hub id) from its config.json, read without loading
    weights (a hub id needs the network or a cached copy: leakaudit.models.resolve_model_ref)."""
    from leakaudit.models import resolve_model_ref

    path = Path(resolve_model_ref(ref))
    return ModelShape.from_config(json.loads((path / "config.json").read_text(encoding="utf-8")))


def format_plan(cost: StudyCost, here: dict[str, float] | None, rates: CostRates | None, gpu: GPUClass,
                on_gpu: dict[str, float], utilisation: tuple[float, float]) -> str:
    """The dry run's printout."""
    lines = [f"models to train: {sum(cost.models.values())} "
             f"({', '.join(f'{v} {k}' for k, v in cost.models.items() if v)}); base {cost.shape.params / 1e6:.0f}M "
             f"parameters; OPD steps: {cost.opd_steps}"]
    for dom, ln in cost.lengths.items():
        lines.append(f"  {dom}: mean tokens per record: prompt {ln.prompt:.0f}, teacher context "
                     f"{ln.teacher_context:.0f}, reference {ln.reference:.0f} "
                     f"({'measured on the records' if ln.measured else 'token budgets: upper bounds'})")
    lines.append(f"{'stage':10s} {'jobs':>5s} {'PFLOP':>9s} {'peak GB/job':>12s} {'here':>10s} "
                 f"{'one ' + gpu.name:>12s}   tokens (M)")
    for s, c in cost.stages.items():
        if not c.flops:
            continue
        toks = ", ".join(f"{k} {v / 1e6:.2f}" for k, v in c.tokens.items())
        h = duration_text(here[s]) if here is not None else "?"
        lines.append(f"{s:10s} {c.jobs:5d} {c.flops / 1e15:9.3f} {c.peak_bytes / 1e9:12.1f} {h:>10s} "
                     f"{duration_text(on_gpu[s]):>12s}   {toks}")
    if here is not None:
        lines.append(f"total here: {duration_text(sum(here.values()))} (rates measured on {rates.machine}, {rates.source})")
    else:
        lines.append("total here: no stored rates for this machine")
    lines.append(f"total on one {gpu.name}: {duration_text(sum(on_gpu.values()))} (dense work at {utilisation[0]:.0%} of "
                 f"{gpu.bf16_flops / 1e12:.0f} TFLOP/s bf16, decoding at {utilisation[1]:.0%} of "
                 f"{gpu.bandwidth / 1e12:.2f} TB/s; model loading not counted; students and targets are independent jobs: "
                 f"divide by the GPUs)")
    lines.append("rollouts and trajectories are counted at their token caps: an upper bound where EOS ends them early")
    return "\n".join(lines)


def duration_text(seconds: float) -> str:
    """A duration for a printout ('45 s', '12.5 min', '1.3 h')."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def prepared_study_cost(study: Any) -> StudyCost:
    """The cost of a prepared leakaudit.study.Study: its plan's workload, its records' measured token lengths."""
    cfg = study.cfg
    lengths = measured_lengths(list(study.records().values()), study.tokenizer, cfg.training.teacher_template)
    return study_cost(cfg, model_shape(cfg.base_model, trust_remote_code=cfg.trust_remote_code),
                      {**budget_lengths(cfg), **lengths}, workload_from_study(study))


def estimate_here(study: Any, *, rates_path: str | Path | None = None) -> tuple[dict[str, float], str] | None:
    """(stage -> estimated seconds on this machine, the machine class the rates were fitted on) for a prepared
    study; None when no stored rates match this machine class. For the study's per-stage ETA lines."""
    from leakaudit.envinfo import cpu_info

    machine = cpu_info()["tag"]
    rates = next((r for r in read_rates(rates_path) if r.machine == machine), None)
    if rates is None:
        return None
    return seconds_here(prepared_study_cost(study), rates), machine


def dry_run(study: Any, *, gpu: str = "H100", dense_utilisation: float = 0.35, bandwidth_utilisation: float = 0.5,
            rates_path: str | Path | None = None) -> str:
    """Validate everything a run of `study` (a leakaudit.study.Study) would, write nothing, and return the plan with
    its cost (format_plan). Records are loaded (so their token lengths are measured); no model weights are."""
    from leakaudit.envinfo import cpu_info
    from leakaudit.errors import ConfigError

    cards = gpu_classes()
    if gpu not in cards:
        raise ConfigError(f"--gpu {gpu!r}: unknown GPU class; choose one of {', '.join(cards)}")
    study.prepare(start_executor=False)
    cfg = study.cfg
    cost = prepared_study_cost(study)
    machine = cpu_info()["tag"]
    rates = next((r for r in read_rates(rates_path) if r.machine == machine), None)
    here = seconds_here(cost, rates) if rates is not None else None
    on_gpu = seconds_on_gpu(cost, cards[gpu], dense_utilisation=dense_utilisation,
                            bandwidth_utilisation=bandwidth_utilisation, bf16=bool(cfg.training.bf16_autocast))
    text = format_plan(cost, here, rates, cards[gpu], on_gpu, (dense_utilisation, bandwidth_utilisation))
    if rates is None:
        text += f"\n(this machine is {machine}; stored rates: " + \
            (", ".join(r.machine for r in read_rates(rates_path)) or "none") + ": python bench/cost_check.py fits them)"
    return text
