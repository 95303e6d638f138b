"""Study configuration: dataclasses with range checks, YAML presets, dotted `--set key=value` overrides.

A resolved config (every default spelled out) is written to ``study.yaml`` in the run directory; its hash
goes into every results file. Stage-specific settings (training, sampling) are kept as plain mappings here
and validated by their owners' dataclasses (shadow_models.OPDConfig, leakaudit.signals.SamplingConfig) when
the pipeline builds them, so one source of truth holds each stage's defaults.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from leakaudit.errors import ConfigError, InputError

PRESETS = ("default", "quick", "cpu-full", "gpu-paper", "tiny")


@dataclass
class DomainSource:
    """Where one domain's records come from."""

    source: str
    """A name from `leakaudit records --list` (champ, humaneval, medical, gsm8k, file, ...)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options for the source (e.g. tables for medical, path and columns for file)."""


@dataclass
class DataConfig:
    domains: dict[str, DomainSource]
    """Domain name -> source. Every domain gets its own students and targets."""
    n_candidates: int = 16
    """Candidate records per domain; each is IN for half of that domain's students."""
    n_population: int = 16
    """Records per domain never trained on by any student (null student, RMIA population, teacher prep)."""
    n_teacher_records: int = 0
    """Extra records per domain for preparing the teacher only (teacher.kind: prepared): disjoint from the
    candidates and the population, never trained on by a student, never scored. A teacher that has learnt to
    answer from its context needs far more examples than the population holds."""
    max_prompt_tokens: int = 384
    """Token budget for a record's prompt; longer records are an input error."""
    max_privileged_tokens: int = 384
    """Token budget for a record's privileged context."""
    drop_over_budget: bool = True
    """Built-in sources: drop records over a token budget from the pool before the split (counted in the
    log). False makes any such record an input error naming it."""

    def __post_init__(self) -> None:
        self.domains = {d: s if isinstance(s, DomainSource) else DomainSource(**s) for d, s in self.domains.items()}
        if not self.domains:
            raise ConfigError("data.domains: at least one domain is needed")
        if self.n_candidates < 4 or self.n_candidates % 2:
            raise ConfigError(f"data.n_candidates must be an even number >= 4, got {self.n_candidates}")
        if self.n_population < 0:
            raise ConfigError("data.n_population must be >= 0")
        if self.n_teacher_records < 0:
            raise ConfigError("data.n_teacher_records must be >= 0")


@dataclass
class PlanConfig:
    n_students: int = 4
    """Students per domain (even). Each is a target in turn; its matched references are the others."""
    null_student: bool = True
    """Also train a student on population records only: the built-in null check (AUROC must be ≈ 0.5)."""
    n_matched_references: int = 0
    """References per record for Leaky (OUT) and LiRA-online (IN); 0 = the most every record allows,
    n_students/2 - 1, fixed so the count never depends on membership."""
    keep_design: str = "lira"
    """'lira' (random balanced halves) or 'balanced_subsets' (every IN-set of size n_students/2 equally often,
    so that which student is a record's matched reference does not depend on its label; see
    leakaudit.membership.balanced_subsets_keep_matrix). With 4 students 'lira' confounds reference identity
    with membership (bench/reference_confound.py)."""

    def __post_init__(self) -> None:
        if self.n_students < 2 or self.n_students % 2:
            raise ConfigError(f"plan.n_students must be even and >= 2, got {self.n_students}")
        if not 0 <= self.n_matched_references <= self.n_students // 2 - 1 and self.n_matched_references:
            raise ConfigError(f"plan.n_matched_references must be in [1, n_students/2 - 1 = "
                              f"{self.n_students // 2 - 1}] or 0")
        if self.n_students < 4:
            raise ConfigError("plan.n_students must be >= 4 so every record has at least one matched reference")
        if self.keep_design not in ("lira", "balanced_subsets"):
            raise ConfigError(f"plan.keep_design must be 'lira' or 'balanced_subsets', got {self.keep_design!r}")

    @property
    def k_refs(self) -> int:
        return self.n_matched_references or self.n_students // 2 - 1


@dataclass
class TeacherConfig:
    kind: str = "self"
    """'self' = the frozen base student; 'prepared' = the base after SFT on population records to answer
    from its privileged context (cached per run); or a model reference (hub id / directory)."""
    prep: dict[str, Any] = field(default_factory=dict)
    """Options for shadow_models.TeacherPrepConfig when kind == 'prepared'."""


@dataclass
class SignalsConfig:
    backend: str = "transformers"
    """'transformers' (CPU/GPU) or 'vllm' (GPU; optional extra, untested on CPU-only machines)."""
    sampling: dict[str, Any] = field(default_factory=dict)
    """leakaudit.signals.SamplingConfig fields for fresh trajectories (n_per_record, temperature, ...)."""
    score_batch_size: int = 16
    """Sequences per forward pass when scoring."""
    autocast_bf16: bool = False
    """bf16 autocast for scoring. Off by default: its per-token error (mean 0.016, max 0.18 nats on
    smollm2-135m, bench/bench_signals.py) is the size of the gaps attacks look for. Sampling uses bf16
    where the CPU supports it natively either way (every model then scores the samples in fp32)."""

    def __post_init__(self) -> None:
        if self.backend not in ("transformers", "vllm"):
            raise ConfigError(f"signals.backend must be 'transformers' or 'vllm', got {self.backend!r}")
        if self.score_batch_size < 1:
            raise ConfigError("signals.score_batch_size must be >= 1")


@dataclass
class AttackSpecConfig:
    name: str
    """A registered attack (`leakaudit attacks`)."""
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    """Display name; defaults to the attack name (set it when one attack runs with several params)."""


@dataclass
class MetricsConfig:
    n_boot: int = 1000
    """Bootstrap resamples for AUROC confidence intervals."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_boot < 0:
            raise ConfigError("metrics.n_boot must be >= 0")


@dataclass
class StudyConfig:
    name: str = "default"
    """Run directory name under out_root."""
    out_root: str = "runs"
    seed: int = 0
    """Master seed: membership plan, training order, sampling (each stage derives its own from this)."""
    base_model: str = "smollm2-135m"
    """Student initialisation: 'smollm2-135m' (offline), a hub id, or a local checkpoint directory."""
    trust_remote_code: bool = False
    data: DataConfig = field(default_factory=lambda: DataConfig(domains={"math": DomainSource("champ")}))
    plan: PlanConfig = field(default_factory=PlanConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    training: dict[str, Any] = field(default_factory=dict)
    """shadow_models.OPDConfig fields (loss, epochs, learning_rate, ...)."""
    signals: SignalsConfig = field(default_factory=SignalsConfig)
    attacks: list[AttackSpecConfig] = field(default_factory=list)
    """Attacks to run; empty = every registered attack with its default parameters."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def __post_init__(self) -> None:
        if isinstance(self.data, dict):
            self.data = DataConfig(**self.data)
        for name, cls in (("plan", PlanConfig), ("teacher", TeacherConfig), ("signals", SignalsConfig),
                          ("metrics", MetricsConfig)):
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, _build(cls, value, name))
        self.attacks = [a if isinstance(a, AttackSpecConfig) else _build(AttackSpecConfig, a, "attacks[]")
                        for a in self.attacks]

    @property
    def run_dir(self) -> Path:
        return Path(self.out_root) / self.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def hash(self) -> str:
        """sha256 (first 12 hex) of the resolved config, ignoring where the run is written."""
        d = self.to_dict()
        d.pop("out_root")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
    return cls(**values)


def preset_dict(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {list(PRESETS)}")
    text = resources.files("leakaudit.presets").joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text) or {}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_set(d: dict[str, Any], assignment: str) -> dict[str, Any]:
    """Apply one ``dotted.key=value`` override (value parsed as YAML: numbers, bools, lists)."""
    if "=" not in assignment:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    key, raw = assignment.split("=", 1)
    value = yaml.safe_load(raw) if raw.strip() else ""
    out = copy.deepcopy(d)
    node = out
    parts = key.strip().split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {p} is not a mapping")
    node[parts[-1]] = value
    return out


def load_config(path: str | Path | None = None, *, preset: str | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> StudyConfig:
    """Resolve a study config: preset (default 'default', or the file's `preset:` key) < file < --set."""
    file_dict: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise InputError("config file not found", path=str(p))
        try:
            file_dict = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise InputError(f"invalid YAML: {e}", path=str(p)) from e
        if not isinstance(file_dict, dict):
            raise InputError("a study config must be a mapping", path=str(p))
    file_dict.pop("_meta", None)  # provenance block that run-study appends to study.yaml
    preset = preset or file_dict.pop("preset", None) or "default"
    merged = deep_merge(preset_dict(preset), file_dict)
    file_domains = (file_dict.get("data") or {}).get("domains") if isinstance(file_dict.get("data"), dict) else None
    if file_domains is not None:
        # the domains a file lists are the study's domains: never add the preset's other domains to them
        merged["data"]["domains"] = copy.deepcopy(file_domains)
    for assignment in overrides:
        merged = apply_set(merged, assignment)
    merged.setdefault("name", preset)
    try:
        return _build(StudyConfig, merged, "study")
    except TypeError as e:
        raise ConfigError(f"study config: {e}") from e


def dump_config(cfg: StudyConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
