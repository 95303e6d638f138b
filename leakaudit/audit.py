"""`leakaudit audit`: the auditor's question about one deployed student, as a config the pipeline runs.

The auditor holds a deployed student (the target), candidate records (was each one in its teacher's
privileged data?), and population records from the same distribution known to be outside it. An audit's config
has an `audit` section (`audit_config`: the request, the recipe, the attacks in their offline forms); the pipeline
runs it with the disjoint design (leakaudit.pipeline.audit_design): the target is given, and the references are
either given (students trained without any candidate) or trained here on population records with the study's OPD
recipe (`reference_sizes`, `reference_recipe`). Same stages, same assembler, same resume checks: an audit
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


# ---- the null sample and the verdict ---------------------------------------------------------------------------
NULL_SCORES_FILE = "null_scores.parquet"
"""The null sample's rows of the attacks (scores.parquet's schema), beside scores.parquet, which holds the
candidates' rows only."""
MIN_REFERENCE_RECORDS = 2
"""Population records the references keep at least when the null sample is split off the population."""


def default_null_size(n_population: int) -> int:
    """Population records split off as the null sample by default: enough for p = 0.01
    (leakaudit.verdict.null_size_for(DEFAULT_NULL_LEVEL) = 99) when the population holds twice that, else half of it
    (the references train on the other half). A larger null sample costs sampling and scoring only (the target and
    every reference score its records; nothing is trained on it)."""
    from leakaudit.verdict import DEFAULT_NULL_LEVEL, null_size_for

    return min(null_size_for(DEFAULT_NULL_LEVEL), n_population // 2)


def split_null_sample(population: list[str], null_size: int, seed: int, domain: str) -> tuple[list[str], list[str]]:
    """(null sample, the rest for the references) from the population ids: a seeded draw of `null_size` records
    (0 = default_null_size). ConfigError naming --null-size when fewer than MIN_REFERENCE_RECORDS would remain."""
    from leakaudit.membership import shuffled

    n = null_size or default_null_size(len(population))
    if n < 1 or len(population) - n < MIN_REFERENCE_RECORDS:
        raise ConfigError(f"--null-size: the population has {len(population)} records; a null sample of {n} leaves "
                          f"fewer than {MIN_REFERENCE_RECORDS} for the references (give a larger --population, a "
                          "smaller --null-size, or a separate --null-sample file)")
    chosen = set(shuffled(sorted(population), seed, f"null sample {domain}")[:n])
    return [r for r in population if r in chosen], [r for r in population if r not in chosen]


def null_source_words(cfg: StudyConfig, n_null: int, n_population: int) -> str:
    """Where the null sample came from, in words (audit.json's verdict.null_source and the report)."""
    if cfg.audit is not None and cfg.audit.null_sample:
        return f"{n_null} records of --null-sample {cfg.audit.null_sample}, trained on by no reference"
    if cfg.audit is not None and cfg.audit.references:
        return (f"{n_null} records split off the population (the other {n_population} are RMIA's population; the given "
                "references are taken to have trained on neither)")
    return (f"{n_null} records split off the population ({n_population} left for the references, which never train "
            "on the null sample)")


# ---- the references' recipe -----------------------------------------------------------------------------------
HELD_OUT_FRACTION = 4
"""An audit that trains its references holds out 1/4 of the population from all of them: RMIA compares each
candidate against population records that no reference (and not the target) trained on."""


def reference_sizes(audit: AuditConfig, n_population: int) -> tuple[int, int]:
    """(population records no reference trains on, population records each trained reference trains on), from
    the population left once the null sample is split off: given references hold out nothing; trained ones hold out
    1/HELD_OUT_FRACTION (at least 1) and train on audit.records_per_reference records each (0: half the rest)."""
    held_out = 0 if audit.references else max(1, n_population // HELD_OUT_FRACTION)
    return held_out, audit.records_per_reference or max(1, (n_population - held_out) // 2)


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


def reference_recipe(cfg: StudyConfig, plan, sources: dict[str, str] | None = None) -> dict[str, Any]:
    """audit.json's reference_recipe: how the references were made (teacher, loss, passes, batch size, lr, rollout
    length, records per reference, background) and where each setting came from (`recipe_sources`; None = the study
    config, e.g. a run resumed through run-study). `background`: the number of records of --background every
    reference also trained on, with the file, or None without one. Given references
    (--references) were not trained here: their recipe is their maker's, and only that is recorded."""
    refs = [m for m, info in plan.models.items() if info["role"] == "reference"]
    if cfg.audit is not None and cfg.audit.references:
        return {"trained_here": False, "n_references": len(refs),
                "note": "references given (--references): trained elsewhere, their recipe is not known here"}
    teacher = cfg.teacher
    t = cfg.training
    sources = sources or {k: "study config" for k in ("teacher", *RECIPE_TRAINING_KEYS)}
    return {
        "trained_here": True,
        "n_references": len(refs),
        "teacher": teacher.kind,
        "teacher_model": ("frozen base (self-distillation)" if teacher.kind == "self"
                          else "models/_teacher (prepared here on the population, never a candidate)"
                          if teacher.prepared else teacher.kind),
        "sft_target": teacher.sft_target,
        **{k: getattr(t, k) for k in RECIPE_TRAINING_KEYS},
        "records_per_reference": plan.params.get("records_per_reference"),
        "background": ({"n_records": len(plan.background.get(next(iter(plan.candidates)), [])),
                        "path": cfg.audit.background} if cfg.audit is not None and cfg.audit.background else None),
        "sources": dict(sources),
        "source": _summary_source(sources),
    }


def _summary_source(sources: dict[str, str]) -> str:
    """One word for where the recipe came from: 'flags' (--teacher / --set), 'config <path>', 'preset <name>',
    'defaults', or several of them joined with ' + '."""
    kinds = []
    for s in sources.values():
        kind = ("flags" if s.startswith(("--teacher", "--set")) else s[2:] if s.startswith("--config")
                else "defaults" if s.startswith("audit default") else s)
        if kind not in kinds:
            kinds.append(kind)
    return " + ".join(kinds)


def recipe_line(recipe: dict[str, Any]) -> str:
    """One line stating the references' recipe (printed by the CLI, logged at the start of an audit)."""
    if not recipe.get("trained_here"):
        return f"references: {recipe.get('n_references')} given (--references), recipe not known here"
    parts = [f"teacher {recipe['teacher']}"] + [f"{k} {recipe[k]}" for k in RECIPE_TRAINING_KEYS]
    background = recipe.get("background")
    also = f" + a background of {background['n_records']} records" if background else ""
    return (f"references: {recipe['n_references']} trained here on {recipe['records_per_reference']} population "
            f"records each{also}, " + ", ".join(parts) + f" (from {recipe['source']})")
