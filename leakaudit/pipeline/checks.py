"""The checks a run makes before its first file (besides its stage marks, leakaudit.pipeline.runner): the run
directory's config, the models it reads, the paths its names make, the plan a resumed run saved. Each raises
ConfigError / InputError (exit 2) and writes nothing."""

from __future__ import annotations

from typing import Callable

from leakaudit.config import StudyConfig
from leakaudit.errors import ConfigError, InputError
from leakaudit.membership import MembershipPlan
from leakaudit.rundir import RunDir


def model_ref_key(name: str) -> str:
    """The config key (and flag) of a run's external model, for errors: 'base' -> 'base_model', ..."""
    if name.startswith("reference"):
        return f"audit.references[{name[len('reference'):]}] (--references)"
    return {"base": "base_model (--base-model)", "teacher": "teacher.kind (--teacher)",
            "target": "audit.target (--target)"}.get(name, name)


def check_model_refs(cfg: StudyConfig, models: dict[str, str], log: Callable[[str], None]) -> None:
    """Every model the run reads (`models`: error key -> reference) resolves, and a local one holds safetensors,
    before the run's first file (a directory of pickled weights passed here and failed at its first load, after the
    plan was written)."""
    from leakaudit.models import check_loads_without_code, check_safetensors_only, resolve_model_ref

    for name, ref in models.items():
        try:
            path = resolve_model_ref(ref)
            check_safetensors_only(path)
            if not cfg.trust_remote_code:
                check_loads_without_code(path)
        except InputError as e:
            raise InputError(f"{model_ref_key(name)}: {e}") from None
    if cfg.trust_remote_code:
        log("notice: trust_remote_code is true: code shipped with these models may run on this machine: "
            + ", ".join(f"{model_ref_key(n)} = {r}" for n, r in models.items()))


def check_run_dir_config(run: RunDir, cfg: StudyConfig, *, forced_all: bool) -> None:
    """A run directory holding another config (its study.yaml's recorded hash) is refused unless every stage is
    forced."""
    if not run.config.is_file():
        return
    from leakaudit.yamlio import read_yaml

    old = read_yaml(run.config) or {}
    old_hash = (old.get("_meta") or {}).get("config_hash")
    # str(): an unquoted hash of decimal digits only (~0.4% of hashes) reads back as an int
    if str(old_hash) != cfg.hash() and not forced_all:
        what = "an audit" if "audit" in old and old.get("audit") else "a study"
        raise ConfigError(f"{run.root} holds {what} with a different config (hash {old_hash}, now "
                          f"{cfg.hash()}){_precision_hint(old, cfg)}; choose another name/--out or --force all")


def _precision_hint(old: dict, cfg: StudyConfig) -> str:
    """Why the hash differs when bf16_autocast resolved otherwise here than where the run was started."""
    hints = []
    for key, section, now in (("training.bf16_autocast", old.get("training"), cfg.training.bf16_autocast),
                              ("teacher.prep.bf16_autocast", (old.get("teacher") or {}).get("prep"),
                               cfg.teacher.prep.bf16_autocast)):
        before = section.get("bf16_autocast") if isinstance(section, dict) else None
        if isinstance(before, bool) and before != now:
            hints.append(f"{key} was {str(before).lower()} there, is {str(now).lower()} here ('auto' follows "
                         f"whether bf16 is native on this machine; --set {key}={str(before).lower()} goes on as "
                         "started)")
    return "; " + "; ".join(hints) if hints else ""


def check_paths_inside(run: RunDir, plan: MembershipPlan) -> None:
    """Every path of the run built from a name the user gave (domains through model ids) is a safe file name
    and resolves inside the run directory, before the first write."""
    from leakaudit.rundir import check_safe_name

    for model_id in plan.models:
        what = f"model id {model_id!r} (from the domain of the records or data.domains)"
        check_safe_name(model_id, what)
        for path in (run.model(model_id), run.fixed(model_id), run.fresh(model_id)):
            run.check_inside(path, what)


def check_saved_plan(run: RunDir, plan: MembershipPlan) -> None:
    """A resumed run trains and scores with the plan prepare() rebuilt from the config, while the report and
    `leakaudit train` read the one the plan stage saved: they must be one plan (plan code or a source can change
    between two calls while the config hash and the stage marks stay equal)."""
    if not MembershipPlan.load(run.plan_dir).equals(plan):
        raise InputError("the membership plan rebuilt from this config differs from the one this run saved "
                         "(plan.json, membership.parquet): the plan code or its records changed since; rerun "
                         "with --force plan (every later stage is redone) or use another run directory",
                         path=str(run.root))
