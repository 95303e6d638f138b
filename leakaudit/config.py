"""The study config: `StudyConfig` (its sections, the seed, the base model), loading it, the presets and its hash.

`load_config` resolves preset < file < `--set` into one mapping and validates ALL of it before anything runs:
unknown keys are refused at every depth, types are checked, every `__post_init__` range check runs, attack names
and their params are resolved against the attack registry, and data sources and their option names against the
source registry (no data is loaded). Every failure is a ConfigError (InputError for an unreadable config file)
whose message names the dotted location, e.g. ``training.epochz: unknown key`` (leakaudit.config_errors).

Each section lives beside what it configures, as TRL keeps *_config.py beside *_trainer.py; they are re-exported
here, so ``from leakaudit.config import DataConfig`` keeps working:

    data        leakaudit.data.config          DataConfig, DomainSource
    plan        leakaudit.membership_config    PlanConfig
    teacher     shadow_models.config           TeacherConfig (teacher.prep: TeacherPrepConfig)
    training    shadow_models.config           OPDConfig
    signals     leakaudit.signals.config       SignalsConfig (signals.sampling: leakaudit.signals.types.SamplingConfig)
    attacks     leakaudit.scoring_config       AttackSpecConfig (one entry of the list)
    metrics     leakaudit.metrics_config       MetricsConfig
    audit       leakaudit.audit_config         AuditConfig (its flags: leakaudit.audit_options)
    execution   leakaudit.executors_config     ExecutionConfig

Why pydantic: the sections stay plain stdlib dataclasses owned by their packages (with their docstrings and
`__post_init__` checks, constructed directly by library code and tests); pydantic's TypeAdapter validates such
dataclasses as they are, including their `tuple[str, ...]` and `int | None` fields, and runs `__post_init__`.
OmegaConf structured configs do not support tuple fields. Every section sets ``__pydantic_config__ = FORBID``
(leakaudit.config_section) so unknown keys are rejected wherever they appear.

A resolved config (every default spelled out, tuples as lists, None as null) is written to ``study.yaml`` in the
run directory; ``load_config(run_dir / "study.yaml")`` gives back the identical config and `StudyConfig.hash()`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ConfigDict, StrictBool, StrictInt, TypeAdapter, ValidationError

from leakaudit.audit_config import AuditConfig
from leakaudit.config_errors import describe_errors
from leakaudit.config_section import Checked
from leakaudit.data.config import DataConfig, DomainSource, default_data
from leakaudit.errors import ConfigError, InputError
from leakaudit.executors_config import EXECUTION_BACKENDS, ExecutionConfig
from leakaudit.membership_config import PlanConfig
from leakaudit.metrics_config import MetricsConfig
from leakaudit.presets import preset_names
from leakaudit.rundir import check_run_name
from leakaudit.scoring_config import AttackSpecConfig
from leakaudit.signals.config import SignalsConfig
from leakaudit.signals.types import SamplingConfig
from leakaudit.yamlio import load_yaml, read_yaml
from shadow_models.config import (PREPARED_TEACHERS, OPDConfig, TeacherConfig, TeacherPrepConfig,
                                  resume_field_defaults)

__all__ = [
    "StudyConfig", "load_config", "validate_config", "dump_config", "restrict_domains", "apply_set", "deep_merge",
    "preset_dict", "with_seed", "PRESETS", "NEUTRAL_DEFAULTS", "PACING_KEYS",
    # the sections, re-exported from beside what they configure
    "AttackSpecConfig", "AuditConfig", "DataConfig", "DomainSource", "ExecutionConfig", "EXECUTION_BACKENDS",
    "MetricsConfig", "OPDConfig", "PlanConfig", "PREPARED_TEACHERS", "SamplingConfig", "SignalsConfig",
    "TeacherConfig", "TeacherPrepConfig",
]

PRESETS = preset_names()  # the YAML files in leakaudit/presets, default first


@dataclass
class StudyConfig:
    # numbers given for a str field (`--set name=2024`) are read as that string
    __pydantic_config__ = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    name: str = "default"
    """Run directory name under out_root."""
    out_root: str = "runs"
    """Directory the run directory `name` is made in."""
    seed: StrictInt = 0
    """Master seed: membership plan, training order, sampling (each stage derives its own from this)."""
    base_model: str = "smollm2-135m"
    """Student initialisation: 'smollm2-135m' (offline), a hub id, or a local checkpoint directory."""
    trust_remote_code: StrictBool = False
    """Let transformers run code shipped with a hub model. Off: only architectures transformers itself knows."""
    data: Checked[DataConfig] = field(default_factory=default_data)
    plan: Checked[PlanConfig] = field(default_factory=PlanConfig)
    teacher: Checked[TeacherConfig] = field(default_factory=TeacherConfig)
    training: Checked[OPDConfig] = field(default_factory=OPDConfig)
    """shadow_models.OPDConfig (loss, epochs, learning_rate, ...). Its seed stays null here: the study derives
    one per student from the master `seed`."""
    signals: Checked[SignalsConfig] = field(default_factory=SignalsConfig)
    attacks: list[Checked[AttackSpecConfig]] = field(default_factory=list)
    """Attacks to run; empty = every registered attack with its default parameters."""
    metrics: Checked[MetricsConfig] = field(default_factory=MetricsConfig)
    audit: Checked[AuditConfig] | None = None
    """Set for an audit (`leakaudit audit`): the given target and how its references are made."""
    execution: Checked[ExecutionConfig] = field(default_factory=ExecutionConfig)
    """Where the students and signals jobs run (local or Ray); not part of `hash()`."""

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError("name: must be a non-empty run directory name")
        check_run_name(self.name)
        if self.seed < 0:
            raise ConfigError(f"seed: must be >= 0, got {self.seed}")
        if self.training.seed is not None:
            raise ConfigError("training.seed is derived per student from the study's `seed`; set `seed` instead")
        seen: dict[str, int] = {}
        for i, a in enumerate(self.attacks):
            if a.display in seen:
                raise ConfigError(f"attacks[{i}]: label {a.display!r} is already used by attacks[{seen[a.display]}]; "
                                  f"give one of them a distinct `label`")
            seen[a.display] = i
        n_null = self.plan.n_null_students if self.plan.null_student else 0
        if self.audit is None and n_null > 1 and self.data.n_population < n_null * (self.data.n_candidates // 2):
            raise ConfigError(f"data.n_population: {n_null} null students (plan.n_null_students) each train on "
                              f"n_candidates/2 = {self.data.n_candidates // 2} population records of their own, "
                              f"{n_null * (self.data.n_candidates // 2)} in all; got {self.data.n_population}")
        if self.plan.n_offline_references and self.data.n_reference_records < self.data.n_candidates // 2:
            raise ConfigError(f"data.n_reference_records: {self.plan.n_offline_references} offline references "
                              f"(plan.n_offline_references) each train on n_candidates/2 = {self.data.n_candidates // 2} "
                              f"reference-only records; got {self.data.n_reference_records}")

    @property
    def run_dir(self) -> Path:
        return Path(self.out_root) / self.name

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML types, every default spelled out (tuples as lists, None as None)."""
        return _STUDY.dump_python(self, mode="json")

    def hash(self) -> str:
        """sha256 (first 12 hex) of the resolved config (keys sorted), ignoring where the run is written
        (`out_root`), how its jobs are executed (`execution`: results do not depend on it) and whether students
        keep checkpoints (`training.save_checkpoints` / `checkpoint_every`: a resumed student is the same), and every
        key of NEUTRAL_DEFAULTS at its neutral value (an option added later, at the value that computes what the
        code did before it existed: runs made before it keep their hash and resume), and the PACING_KEYS at any."""
        return hashlib.sha256(json.dumps(self.hashed_dict(), sort_keys=True).encode()).hexdigest()[:12]

    def hashed_dict(self) -> dict[str, Any]:
        """The resolved config as `hash()` sees it (out_root, execution and neutral defaults left out, the training
        checkpoint keys read at their defaults: shadow_models.config.RESUME_FIELDS)."""
        d = self.to_dict()
        d.pop("out_root")
        d.pop("execution")
        d["training"].update(resume_field_defaults(OPDConfig))  # checkpointing: how a run survives a stop
        for dotted, neutral in NEUTRAL_DEFAULTS.items():
            *parents, key = dotted.split(".")
            section = d
            for p in parents:
                section = section.get(p) if isinstance(section, dict) else None
            if isinstance(section, dict) and key in section and (section[key] == neutral or dotted in PACING_KEYS):
                del section[key]
        return d


NEUTRAL_DEFAULTS: dict[str, Any] = {
    "data.n_background": 0,
    "data.n_reference_records": 0,
    "plan.n_offline_references": 0,
    "plan.n_null_students": 1,
    # the decode loop samples the same tokens as generate (tests/test_decode.py), so runs before the field resume
    "training.rollout_decoder": "loop",
    "training.rollout_seeding": "step",
    "audit.target_model": None,
    "audit.api_key_env": None,
    "audit.api_concurrency": 4,
    "audit.api_timeout_s": 60.0,
    "audit.api_max_retries": 4,
    # the verdict's keys at their defaults: an audit made before them keeps its hash, and its saved plan (no null
    # sample) is then refused by the plan check with its --force plan advice (Study._check_saved_plan)
    "audit.null_sample": None,
    "audit.null_size": 0,
    "audit.fdr": 0.1,
    "audit.fpr": None,
    "audit.prompt_column": None,
    "audit.privileged_column": None,
    "audit.id_column": None,
    "audit.domain": None,
}
"""Dotted config keys added after runs existed -> the value at which they change nothing; `StudyConfig.hash` leaves
them out at that value. (Adding a key with its neutral value here is the one way to add an option without
invalidating every finished run directory.)"""
PACING_KEYS = ("audit.api_key_env", "audit.api_concurrency", "audit.api_timeout_s", "audit.api_max_retries")
"""Keys of NEUTRAL_DEFAULTS left out of the hash at every value: how an API target is reached and paced changes no
result (the journal keys requests by their bodies), so a rerun with more concurrency or another key variable
resumes the same audit."""

_STUDY = TypeAdapter(Checked[StudyConfig])


def with_seed(section: Any, derived: int) -> Any:
    """`section` (OPDConfig, TeacherPrepConfig, SamplingConfig) with its seed set to `derived` if it is None;
    a seed the config sets is kept. How the study resolves the seeds a config leaves null."""
    return section if section.seed is not None else dataclasses.replace(section, seed=derived)


def validate_config(values: dict[str, Any]) -> StudyConfig:
    """A fully checked StudyConfig from a plain mapping (ConfigError naming every bad dotted location)."""
    try:
        return _STUDY.validate_python(values)
    except ValidationError as e:
        raise ConfigError(describe_errors(e, StudyConfig)) from None
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"study config: {e}") from None


# ---- presets, files, --set ------------------------------------------------------------------------------------
def preset_dict(name: str) -> dict[str, Any]:
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {list(PRESETS)}")
    text = resources.files("leakaudit.presets").joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    return load_yaml(text) or {}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key, anything else replaces. Kept by hand: pydantic validates a config but has no
    merge of layered mappings (preset < file < --set)."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_set(d: dict[str, Any], assignment: str) -> dict[str, Any]:
    """Apply one ``dotted.key=value`` override (value parsed as plain YAML: numbers, bools, lists, null)."""
    if "=" not in assignment:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    key, raw = assignment.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    if not all(p.strip() for p in parts):
        raise ConfigError(f"--set {assignment!r}: {key!r} is not a dotted key")
    try:
        value = load_yaml(raw) if raw.strip() else ""  # yaml.safe_load, a duplicate key refused
    except yaml.YAMLError as e:  # includes ConstructorError for tags such as !!python/object
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"--set {assignment!r}: the value is not plain YAML ({problem})") from None
    out = copy.deepcopy(d)
    node = out
    for i, p in enumerate(parts[:-1]):
        if node.get(p) is None:
            node[p] = {}
        node = node[p]
        if not isinstance(node, dict):
            raise ConfigError(f"--set {assignment!r}: {'.'.join(parts[:i + 1])} is not a mapping "
                              f"(it holds {node!r})")
    node[parts[-1]] = value
    return out


def load_config(path: str | Path | None = None, *, preset: str | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> StudyConfig:
    """Resolve a study config: preset (default 'default', or the file's `preset:` key) < file < --set, then
    validate all of it (ConfigError naming the dotted location; InputError for a file that cannot be read)."""
    file_dict: dict[str, Any] = {}
    p = Path(path) if path is not None else None
    if p is not None:
        if not p.is_file():
            raise InputError("config file not found", path=str(p))
        file_dict = read_yaml(p)  # InputError naming the file and line: unreadable, not YAML, a key given twice
        if file_dict is None:
            raise ConfigError(f"{p}: empty config (no keys, only comments or nothing); a study config file must set "
                              "something, e.g. `preset: default`")
        if not isinstance(file_dict, dict):
            raise InputError("a study config must be a mapping", path=str(p))
    file_dict.pop("_meta", None)  # provenance block that run-study appends to study.yaml
    from_file = not preset and bool(file_dict.get("preset"))
    preset = preset or file_dict.pop("preset", None) or "default"
    try:
        merged = deep_merge(preset_dict(preset), file_dict)
    except ConfigError as e:
        if not from_file:
            raise
        raise ConfigError(f"{p}: preset: {e}") from None
    file_domains = (file_dict.get("data") or {}).get("domains") if isinstance(file_dict.get("data"), dict) else None
    if file_domains is not None:
        # the domains a file lists are the study's domains: never add the preset's other domains to them
        merged["data"]["domains"] = copy.deepcopy(file_domains)
    from_file_only = copy.deepcopy(merged)
    for assignment in overrides:
        merged = apply_set(merged, assignment)
    merged.setdefault("name", preset)
    try:
        return validate_config(merged)
    except ConfigError as e:
        if p is None:
            raise
        if overrides:  # name the file only when the file itself (without the --set overrides) is bad
            from_file_only.setdefault("name", preset)
            try:
                validate_config(from_file_only)
            except ConfigError:
                pass
            else:
                raise
        raise ConfigError(f"{p}: {e}") from None


def restrict_domains(cfg: StudyConfig, domains: list[str] | tuple[str, ...]) -> StudyConfig:
    """The same study on a subset of its domains (a *shard*, run-study --domain): data.domains keeps only `domains`
    (in the config's order) and the run is named `<name>-<domain>[-<domain>...]`. Records, plan, students and
    sampling of a domain are seeded by the master seed and the domain's name alone (leakaudit.membership), so a
    shard's domain gets the records, members and student seeds the whole study would give it; what differs is the
    teacher, which a shard prepares on its own domains' records only. `leakaudit pool` joins shards again."""
    unknown = [d for d in domains if d not in cfg.data.domains]
    if unknown:
        raise ConfigError(f"--domain {', '.join(unknown)}: not a domain of this study (data.domains has "
                          f"{', '.join(cfg.data.domains)})")
    if not domains:
        return cfg
    d = cfg.to_dict()
    keep = [k for k in cfg.data.domains if k in set(domains)]
    d["data"]["domains"] = {k: d["data"]["domains"][k] for k in keep}
    d["name"] = "-".join([cfg.name, *keep])
    return validate_config(d)


def dump_config(cfg: StudyConfig) -> str:
    """study.yaml: every key, defaults spelled out; `load_config` of it gives back the same `cfg.hash()`."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True)
