"""`leakaudit audit`: the auditor's question about one deployed student, as a config the pipeline runs.

The auditor holds a deployed student (the target), candidate records (was each one in its teacher's
privileged data?), and population records from the same distribution known to be outside it. An audit's config
has an `audit` section (`audit_config`: the request, the recipe, the attacks in their offline forms); the pipeline
runs it with the disjoint design (leakaudit.pipeline.audit_design): the target is given, and the references are
either given (students trained without any candidate) or trained here on population records with the study's OPD
recipe (leakaudit.pipeline.audit_plan: `reference_sizes`, `reference_recipe`). Same stages, same assembler, same resume checks: an audit
directory that holds another target, other candidates or another recipe is refused (config hash, records
hash, model digests), never silently reused.

The references' recipe. References estimate what the target would look like had it not trained on a
candidate, so they are trained the way the target was: its teacher (`--teacher self | prepared | restated | plan |
a model reference`, as teacher.kind accepts), its loss, passes, batch size, learning rate and rollout length
(training.*), taken from `--config` (a study config: its training and teacher sections), `--preset`, `--set`
and `--teacher`, in that order of precedence from low to high. With none of them the references self-distil
from the frozen base with the default preset's training settings (AUDIT_DEFAULTS: an auditor who does not
know the target's teacher). audit.json records the recipe and where each part of it came from
("reference_recipe"); the CLI prints it.

Attacks. Every reference of an audit is OUT for every candidate, so the online forms that need IN references
cannot run; the audit runs the offline forms the attacks declare instead (leakaudit.scoring.offline_attacks): RMIA offline (rmia with
offline=true, labelled rmia_offline: pr(x) ~ ((1 + a) pr_OUT(x) + (1 - a)) / 2, attacks/rmia.py) in place of
rmia, and lira_offline (a one-sided test against the OUT Gaussian, attacks/lira.py) in place of lira_online.

Run directory: the study layout plus `candidates.csv` (one row per candidate, one column per attack, higher =
more likely a member, then the primary attack's conformal `p_value` and `flagged`), `null_scores.parquet` and
`audit.json` with the verdict (leakaudit.verdict: the candidates against a null sample of known non-members that no
reference trained on, split off the population or given with --null-sample). Labels, when every candidate carries
`meta.is_member`, turn the scores into metrics and a report; without them the report is the verdict box.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leakaudit.audit_options import flag_named
from leakaudit.config import PREPARED_TEACHERS, PRESETS, AttackSpecConfig, AuditConfig, StudyConfig, load_config
from leakaudit.errors import ConfigError, InputError
from leakaudit.scoring import offline_attacks

AUDIT_DEFAULTS = ("teacher.kind=self",)
"""Settings an audit starts from when no recipe is given (no --config, --preset or --teacher): its references
self-distil from the frozen base (an auditor who does not know the target's teacher)."""
TEACHER_KINDS = ("self", *PREPARED_TEACHERS)
"""--teacher values other than a model reference (leakaudit.config.TeacherConfig.kind)."""
RECIPE_TRAINING_KEYS = ("loss", "epochs", "batch_size", "learning_rate", "max_new_tokens", "lora_rank",
                        "bf16_autocast")
"""training.* settings audit.json's reference_recipe states (every other one is in study.yaml); bf16_autocast as
resolved on this machine ('auto' -> true where bf16 is native, leakaudit.precision)."""


@dataclass
class AuditRequest:
    target: str
    candidates: Path
    population: Path | None = None
    background: Path | None = None
    """--background: records every trained reference also trains on (the target's background set)."""
    references: list[str] = field(default_factory=list)
    n_references: int = 4
    base_model: str | None = None
    """What the target was initialised from; None = the config's base_model."""
    out: Path = Path("runs/audit")
    overrides: list[str] = field(default_factory=list)
    """`--set` overrides applied on top of the preset (training.*, signals.*, attacks, metrics.*, seed)."""
    config: Path | None = None
    """A study config whose recipe (training, teacher, signals, attacks) the references use."""
    preset: str | None = None
    teacher: str | None = None
    """--teacher: the references' teacher.kind (self, prepared, restated or a model reference); None = the
    config's, the preset's, or AUDIT_DEFAULTS'."""
    redact: bool = False
    target_model: str | None = None
    """--target-model: the served model's name when `target` is an API URL (http(s)://HOST:PORT/v1)."""
    api_key_env: str | None = None
    """--api-key-env: the variable holding the API key (None: OPENAI_API_KEY if set; '': no key)."""
    api_concurrency: int = 4
    api_timeout_s: float = 60.0
    api_max_retries: int = 4
    force: list[str] = field(default_factory=list)
    """--force: stages to redo, each with every later stage (or 'all'), as run-study's --force."""
    null_sample: Path | None = None
    """--null-sample: known non-members no reference trains on (the verdict's null sample); None = split one off the
    population (--null-size)."""
    null_size: int = 0
    """--null-size: population records split off as the null sample; 0 = default_null_size."""
    fdr: float = 0.1
    """--fdr: the flagged list's false discovery rate."""
    fpr: float | None = None
    """--fpr: flag each candidate with p <= fpr instead of a BH list."""
    prompt_column: str | None = None
    privileged_column: str | None = None
    id_column: str | None = None
    domain: str | None = None
    """--prompt-column, --privileged-column, --id-column, --domain: how every audit source's rows map to records
    (leakaudit.data.audit_inputs)."""


def check_teacher_flag(value: str | None) -> None:
    """ConfigError naming --teacher unless `value` is None, a teacher kind, or a model reference that resolves."""
    if value is None:
        return
    expected = f"{', '.join(TEACHER_KINDS)} or a model reference (a directory or hub id)"
    if not value.strip():
        raise ConfigError(f"--teacher: must be {expected}, got ''")
    if value in TEACHER_KINDS:
        return
    from leakaudit.models import resolve_model_ref

    try:
        resolve_model_ref(value)
    except InputError as e:
        raise ConfigError(f"--teacher {value!r}: must be {expected}; as a model reference: {e}") from None


def _set_keys(overrides: list[str]) -> list[str]:
    return [a.split("=", 1)[0].strip() for a in overrides if "=" in a]


def _request_layers(req: AuditRequest) -> tuple[list[str], str | None]:
    """(the overrides load_config applies, in order; the preset) for a request, flags checked first."""
    check_teacher_flag(req.teacher)
    if req.preset is not None and req.preset not in PRESETS:
        raise ConfigError(f"--preset {req.preset!r}: unknown preset; choose one of {list(PRESETS)}")
    if req.config is not None and not Path(req.config).is_file():
        raise InputError("--config: no such file", path=str(req.config))
    if req.teacher is not None:
        for a in req.overrides:
            key, _, value = a.partition("=")
            if key.strip() == "teacher.kind" and value.strip() != req.teacher:
                raise ConfigError(f"--teacher {req.teacher!r} and --set {a!r} disagree; give one of them")
    defaults = AUDIT_DEFAULTS if req.config is None and req.preset is None and req.teacher is None else ()
    teacher = (f"teacher.kind={json.dumps(req.teacher)}",) if req.teacher is not None else ()
    return [*defaults, *teacher, *req.overrides], req.preset


def audit_config(req: AuditRequest) -> StudyConfig:
    """The study config of an audit: preset (default 'default') < AUDIT_DEFAULTS (only when no recipe is given:
    no --config, --preset or --teacher) < --config file < --teacher < --set, with the audit section, the run
    directory from the request, and the attacks in their offline forms (`offline_attacks`)."""
    overrides, preset = _request_layers(req)
    cfg = load_config(req.config, preset=preset, overrides=overrides)
    out = Path(req.out)
    try:
        audit = AuditConfig(target=str(req.target), candidates=str(req.candidates),
                            population=str(req.population) if req.population else None,
                            background=str(req.background) if req.background else None,
                            references=[str(r) for r in req.references], n_references=req.n_references,
                            target_model=req.target_model, api_key_env=req.api_key_env,
                            api_concurrency=req.api_concurrency, api_timeout_s=req.api_timeout_s,
                            api_max_retries=req.api_max_retries,
                            null_sample=str(req.null_sample) if req.null_sample else None,
                            null_size=req.null_size, fdr=req.fdr, fpr=req.fpr, prompt_column=req.prompt_column,
                            privileged_column=req.privileged_column, id_column=req.id_column, domain=req.domain)
        attacks = offline_attacks(cfg.attacks)
        check_primary_attack(attacks)
        return dataclasses.replace(cfg, audit=audit, base_model=req.base_model or cfg.base_model, name=out.name,
                                   out_root=str(out.parent), attacks=attacks)
    except ConfigError as e:
        raise ConfigError(flag_named(str(e), out)) from None


def check_primary_attack(attacks: list[AttackSpecConfig]) -> None:
    """ConfigError unless the verdict's primary attack (leakaudit.verdict.PRIMARY_ATTACK, by its label) is among an
    audit's attacks: it is checked before anything runs, not after the references are trained."""
    from leakaudit.verdict import PRIMARY_ATTACK

    if not any(a.display == PRIMARY_ATTACK for a in attacks):
        raise ConfigError(f"attacks: an audit's verdict rests on '{PRIMARY_ATTACK}' (its primary attack, fixed in "
                          f"advance); keep it in the attacks list (got {[a.display for a in attacks]})")


def recipe_sources(req: AuditRequest) -> dict[str, str]:
    """Where each part of the references' recipe came from: '--teacher', '--set <key>', '--config <path>',
    'preset <name>' or 'audit default (teacher.kind=self)'. Keys: teacher, and the training keys of
    RECIPE_TRAINING_KEYS."""
    from leakaudit.yamlio import read_yaml

    file_dict: dict[str, Any] = {}
    if req.config is not None and Path(req.config).is_file():
        file_dict = read_yaml(req.config) or {}
    preset = req.preset or (file_dict.get("preset") if isinstance(file_dict, dict) else None) or "default"
    set_keys = _set_keys(req.overrides)

    def in_file(dotted: str) -> bool:
        node: Any = file_dict
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def source(dotted: str) -> str:
        covering = [k for k in set_keys if dotted == k or dotted.startswith(k + ".")]
        if covering:
            return f"--set {covering[-1]}"
        if dotted == "teacher.kind":
            if req.teacher is not None:
                return "--teacher"
            if req.config is None and req.preset is None:
                return "audit default (" + ", ".join(AUDIT_DEFAULTS) + ")"
        if in_file(dotted):
            return f"--config {req.config}"
        return f"preset {preset}"

    out = {"teacher": source("teacher.kind")}
    out.update({k: source(f"training.{k}") for k in RECIPE_TRAINING_KEYS})
    return out
