"""The disjoint audit's plan decisions and the record of how its references were made: the null sample split off
the population, the population each trained reference gets, the references' recipe as audit.json records it and the
line that states it. The design (leakaudit.pipeline.audit_design) and the audit's outputs (audit_outputs) read them;
the request -> config step that comes before (leakaudit.audit) does not."""

from __future__ import annotations

from typing import Any

from leakaudit.audit import RECIPE_TRAINING_KEYS
from leakaudit.config import AuditConfig, StudyConfig
from leakaudit.errors import ConfigError


# ---- the null sample ---------------------------------------------------------------------------
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
