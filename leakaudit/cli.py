"""The `leakaudit` command line. Every command only calls library stages; errors in user input exit with 2.

    leakaudit records --source champ --limit 20
    leakaudit plan --records runs/x/records.jsonl --out runs/x
    leakaudit train --plan runs/default --model-id code-s0 | --all
    leakaudit attacks
    leakaudit run-study [--config study.yaml] [--preset default] [--set key=value ...] [--force STAGE]
    leakaudit audit --target DIR_OR_HUB_ID --candidates FILE --population FILE [--references DIR ...]
    leakaudit report RUN_DIR [--redact]
    leakaudit pool RUN_DIR RUN_DIR ... --out POOLED_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import click
import typer

from leakaudit.errors import InputError, LeakauditError
from leakaudit.executors import JobsFailed

# Plain click help formatting: rich markup would eat bracketed text such as "[redacted]" from the help strings.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Membership-inference audits of students trained by on-policy distillation.")


def _print_version(value: bool) -> None:
    if value:
        from leakaudit import __version__

        typer.echo(f"leakaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Membership-inference audits of students trained by on-policy distillation."""


def _usage_error_classes() -> tuple[type[BaseException], ...]:
    """The usage-error classes a typer app may raise: typer >= 0.2x vendors its own click (typer._click), whose
    exceptions are not click's; older typers raise click's own. Both are caught."""
    classes: list[type[BaseException]] = [click.exceptions.ClickException]
    vendored = getattr(getattr(typer, "_click", None), "exceptions", None)
    if vendored is not None and hasattr(vendored, "ClickException"):
        classes.append(vendored.ClickException)
    typer_exc = getattr(getattr(typer, "exceptions", None), "TyperException", None)
    if typer_exc is not None:
        classes.append(typer_exc)
    return tuple(classes)


def _no_args_classes() -> tuple[type[BaseException], ...]:
    classes = [getattr(click.exceptions, "NoArgsIsHelpError", None),
               getattr(getattr(getattr(typer, "_click", None), "exceptions", None), "NoArgsIsHelpError", None)]
    return tuple(c for c in classes if c is not None)


def _usage_message(e: BaseException) -> str:
    """One line: the error, then where to look (`leakaudit CMD --help`)."""
    fmt = getattr(e, "format_message", None)
    text = fmt() if callable(fmt) else str(e)
    text = " ".join(str(text).split()) or type(e).__name__
    ctx = getattr(e, "ctx", None)
    path = getattr(ctx, "command_path", None) or "leakaudit"
    return f"{text.rstrip('.')} (see `{path} --help`)"


def _preset_names() -> list[str]:
    """The shipped presets (leakaudit.presets.preset_names, the one list), default first; that module imports nothing
    heavy, so `--help` does not import the config module (and torch)."""
    from leakaudit.presets import preset_names

    return list(preset_names())


def _parse_options(options: List[str]) -> dict:
    """`--option key=value` pairs; each value is plain YAML (python tags and other non-standard tags refused)."""
    import yaml

    out = {}
    for o in options:
        k, sep, v = o.partition("=")
        if not sep or not k.strip():
            raise InputError(f"--option expects key=value, got {o!r}")
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as e:
            problem = " ".join(str(getattr(e, "problem", None) or e).split())
            raise InputError(f"--option {k.strip()}: the value {v!r} is not plain YAML ({problem}); quote it to "
                             "pass a string") from e
    return out


@app.command()
def records(
    source: str = typer.Option(None, help="Source name (see --list)."),
    limit: Optional[int] = typer.Option(None, help="Seeded random subset of this many records."),
    seed: int = typer.Option(0, help="Seed for the subset and for sources that sample rows."),
    option: List[str] = typer.Option([], "--option", "-o", help="Source option key=value (YAML value)."),
    out: Optional[Path] = typer.Option(None, help="Write JSONL here instead of printing."),
    list_sources: bool = typer.Option(False, "--list", help="List the available sources."),
    count: bool = typer.Option(False, help="Print only the number of records per domain."),
    config: Optional[Path] = typer.Option(None, help="Study YAML whose base_model and data.max_*_tokens a file's "
                                                     "records are checked against (as run-study checks them)."),
    preset: Optional[str] = typer.Option(None, help="Preset for those checks when no --config (default: default)."),
) -> None:
    """Load records from a source and print them as JSONL (or write them to --out). A file's records are checked
    as run-study checks them: one domain (--option domain=, else the first record's), every text within the
    token budget."""
    from leakaudit.data.records import write_jsonl
    from leakaudit.data.sources import available_sources, check_source_options, load_source

    if list_sources:
        for name, desc in available_sources().items():
            typer.echo(f"{name:10s} {desc}")
        return
    if not source:
        raise typer.BadParameter("--source is required (or --list)")
    options = _parse_options(option)
    check_source_options(source, options, where="--option")  # as run-study checks data.domains.<d>.options
    recs = load_source(source, limit=limit, seed=seed, **options)
    if source == "file":
        _admit_file_records(recs, options, config=config, preset=preset, whole_file=limit is None)
    if count:
        from collections import Counter

        for domain, n in sorted(Counter(r.domain for r in recs).items()):
            typer.echo(f"{domain}\t{n}")
        return
    if out:
        write_jsonl(recs, out)
        typer.echo(f"wrote {len(recs)} records to {out}", err=True)
    else:
        for r in recs:
            typer.echo(json.dumps(r.to_dict(), ensure_ascii=False))


def _admit_file_records(recs: list, options: dict, *, config: Optional[Path], preset: Optional[str],
                        whole_file: bool) -> None:
    """The study's checks of a file's records (leakaudit.data.admit): one domain, within the token budget."""
    from leakaudit.config import load_config
    from leakaudit.data.admit import admit
    from leakaudit.data.user_files import record_lines
    from leakaudit.models import load_tokenizer

    cfg = load_config(config, preset=preset)
    path = str(options["path"])
    domain = options.get("domain") or recs[0].domain
    configured = "--option domain" if options.get("domain") else "this file (its first record's domain)"
    admit(recs, source="file", domain=domain, configured=configured, data=cfg.data, where=path,
          tokenizer=load_tokenizer(cfg.base_model, trust_remote_code=cfg.trust_remote_code),
          lines=record_lines(path) if whole_file else None)


@app.command()
def plan(
    records_file: Path = typer.Option(..., "--records", help="Candidate + population records (JSONL)."),
    out: Path = typer.Option(..., help="Directory for membership.parquet and plan.json."),
    design: str = typer.Option("keep_matrix", help="keep_matrix (studies) or disjoint (audits)."),
    n_students: int = typer.Option(4, help="keep_matrix: students per domain (even)."),
    n_candidates: int = typer.Option(16, help="Candidates per domain (keep_matrix: even, >= 4)."),
    n_population: int = typer.Option(16, help="Population records per domain (never trained by students)."),
    n_references: int = typer.Option(4, help="disjoint: reference students."),
    records_per_reference: int = typer.Option(8, help="disjoint: population records per reference."),
    null_student: bool = typer.Option(True, help="keep_matrix: add a null student per domain."),
    n_null_students: int = typer.Option(1, help="keep_matrix: null students per domain (each another draw of "
                                                "labels for the null check)."),
    keep_design: str = typer.Option("lira", help="keep_matrix: 'lira' (random halves) or 'balanced_subsets'."),
    seed: int = typer.Option(0),
) -> None:
    """Write a seeded membership plan."""
    from leakaudit.data.records import read_jsonl
    from leakaudit.membership import check_n_candidates, disjoint_plan, keep_matrix_plan, split_pool

    if design == "keep_matrix":  # the rule run-study applies to data.n_candidates
        check_n_candidates(n_candidates, field="--n-candidates (keep_matrix design)")
    if n_candidates < 1:
        raise typer.BadParameter(f"must be >= 1, got {n_candidates}", param_hint="'--n-candidates'")
    recs = read_jsonl(records_file)
    pools: dict[str, list[str]] = {}
    for r in recs:
        pools.setdefault(r.domain, []).append(r.record_id)
    if design == "keep_matrix":
        p = keep_matrix_plan(pools, n_students=n_students, n_candidates=n_candidates, n_population=n_population,
                             seed=seed, null_student=null_student, n_null_students=n_null_students,
                             keep_design=keep_design)
    elif design == "disjoint":
        if len(pools) != 1:
            raise typer.BadParameter("disjoint design takes records of one domain")
        (domain, ids), = pools.items()
        cand, popn = split_pool(ids, n_candidates, n_population, seed, salt=domain)
        p = disjoint_plan(cand, popn, domain=domain, n_references=n_references,
                          records_per_reference=records_per_reference, seed=seed)
    else:
        raise typer.BadParameter(f"unknown design {design!r}")
    p.save(out)
    typer.echo(f"plan ({design}, seed {seed}): {len(p.models)} models, "
               f"{sum(map(len, p.candidates.values()))} candidates -> {out}")


@app.command()
def train(
    plan_dir: Path = typer.Option(..., "--plan", help="A run directory (study.yaml, records.jsonl, plan)."),
    model_id: Optional[str] = typer.Option(None, help="Train this student."),
    all_models: bool = typer.Option(False, "--all", help="Train every student of the plan in turn."),
) -> None:
    """Train one student (or all) of a run's membership plan. --all runs them on the run's executor
    (execution.backend in study.yaml: local, or Ray tasks); with local it also prints one-job-per-student lines."""
    from leakaudit.config import load_config
    from leakaudit.study import Study

    cfg = load_config(plan_dir / "study.yaml") if (plan_dir / "study.yaml").is_file() else None
    if cfg is None:
        raise LeakauditError(f"{plan_dir}: no study.yaml (create the run with `leakaudit run-study` first)")
    cfg.out_root, cfg.name = str(plan_dir.parent), plan_dir.name
    study = Study(cfg)
    study.check_before_training()
    p = study.plan()
    if all_models:
        ids = list(p.models)
        if cfg.execution.backend == "local":
            typer.echo("# To fan out on a cluster: execution.backend: ray in study.yaml (docs/ray.md), or one job "
                       "per student (e.g. a job array over these lines):")
            for m in ids:
                typer.echo(f"#   accelerate launch -m leakaudit.cli train --plan {plan_dir} --model-id {m}")
        from leakaudit.locks import run_exclusively

        with run_exclusively(plan_dir):  # --model-id jobs may run side by side; --all is the whole stage
            try:
                study.stage_teacher()
                study.stage_students()
            finally:
                study.close()
    elif model_id:
        if model_id not in p.models:
            raise LeakauditError(f"{plan_dir}: model_id '{model_id}' is not in the plan ({sorted(p.models)})")
        study.stage_teacher()
        study.train_one(model_id)
    else:
        raise typer.BadParameter("give --model-id or --all")


@app.command("attacks")
def attacks_cmd() -> None:
    """List registered attacks, their parameters and the signals each needs."""
    from dataclasses import fields

    from attacks import list_attacks

    for spec in list_attacks():
        params = ", ".join(f"{f.name}={f.default!r}" for f in fields(spec.params_cls))
        typer.echo(f"{spec.name:18s} [{spec.family}] needs: {', '.join(spec.needs)}")
        typer.echo(f"{'':18s} params: {params or '-'}")
        typer.echo(f"{'':18s} {spec.description}")


@app.command("run-study")
def run_study(
    config: Optional[Path] = typer.Option(None, help="Study YAML (keys as in study.yaml of a run)."),
    preset: Optional[str] = typer.Option(None, help=f"A shipped preset: {' | '.join(_preset_names())}."),
    set_: List[str] = typer.Option([], "--set", help="Override: dotted.key=value (YAML value). Repeatable."),
    force: List[str] = typer.Option([], help="Redo a stage and everything after it (or 'all'). Repeatable."),
    domain: List[str] = typer.Option([], help="Run only this domain of the study (a shard, in run directory "
                                              "<name>-<domain>; `leakaudit pool` joins shards). Repeatable."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate everything, write nothing, print the plan: "
                                                          "models, OPD steps, tokens, FLOPs, peak memory per job, "
                                                          "wall time here and on --gpu."),
    gpu: str = typer.Option("H100", help="--dry-run: the GPU class to estimate on (H100, H200, A100-80GB, L40S, "
                                         "A10G, RTX4090)."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default: <out_root>/<name> of the config, "
                                                  "runs/default for the default preset); a shard's is OUT-<domain>."),
) -> None:
    """Run a whole study; completed stages are skipped, so re-running resumes after a crash."""
    import dataclasses
    import time

    from leakaudit.config import load_config, restrict_domains
    from leakaudit.study import Study

    cfg = load_config(config, preset=preset, overrides=set_)
    if out is not None:  # the run directory given as a path, as `audit --out`: its parent and its name
        cfg = dataclasses.replace(cfg, out_root=str(out.parent), name=out.name)
    cfg = restrict_domains(cfg, domain)
    if dry_run:
        from leakaudit.cost import dry_run as plan_cost

        typer.echo(plan_cost(Study(cfg, log=lambda m: typer.echo(m, err=True)), gpu=gpu))
        return
    start = time.time()
    root = Study(cfg, force=force, log=lambda m: typer.echo(m, err=True)).run_all()
    _print_headline(root)
    typer.echo(f"\nwall time {time.time() - start:.0f} s; report: {root / 'report.html'}")


def _print_headline(root: Path) -> None:
    _print_mean_target(root)
    _print_blind_check(root)
    _print_teacher(root)


def _print_mean_target(root: Path) -> None:
    """The headline of metrics.json (leakaudit.per_target.headline_table): per domain, Leaky against the best OUT-only
    baseline by mean per-target AUROC with the paired difference, the online attacks beside it; nothing for a report
    without labels or one that predates the statistic."""
    import json

    from leakaudit.rundir import RunDir

    meta = RunDir(root).metrics_json
    rows = (json.loads(meta.read_text()).get("headline") or []) if meta.is_file() else []
    rows = [r for r in rows if "mean per-target AUROC [95% CI]" in r]
    if rows:
        typer.echo("Mean per-target AUROC [95% CI]; Δ = Leaky − row, paired (> 0: Leaky stronger):")
    for r in rows:
        delta = f"  Δ {r['Δ Leaky − this [95% CI]']}" if r["Δ Leaky − this [95% CI]"] else ""
        typer.echo(f"  {r['domain']:<8} {r['method']:<42} {r['attack']:<34} {r['threat_model']:<8} "
                   f"{r['mean per-target AUROC [95% CI]']}{delta}")


def _print_blind_check(root: Path) -> None:
    """The blind text check under the headline: the warning when members and non-members differ as text, else
    the verdict with the permutation null (leakaudit.report.blind_null)."""
    from leakaudit.report.blind_null import blind_text_verdict, read_blind_null
    from leakaudit.rundir import RunDir

    null = read_blind_null(RunDir(root).blind_text_null)
    if null is not None and not null.empty:
        typer.echo("\n" + blind_text_verdict(null)["message"])


def _print_teacher(root: Path) -> None:
    """Under the blind text check: which teacher the run used and how literal it was, or that the run did not
    measure it (leakaudit.report.teacher)."""
    from leakaudit.report.teacher import teacher_lines

    if Path(root).is_dir():
        typer.echo("\n" + "\n".join(teacher_lines(root)))


@app.command()
def audit(
    target: str = typer.Option(..., help="The deployed student: a directory or hub id, or an OpenAI-compatible "
                                         "server's base URL (http://HOST:PORT/v1; with --target-model)."),
    target_model: Optional[str] = typer.Option(None, help="API target: the served model's name."),
    api_key_env: Optional[str] = typer.Option(None, help="API target: environment variable holding the API key "
                                                         "(default: OPENAI_API_KEY when set; '' = no key). The key "
                                                         "is never logged or written."),
    api_concurrency: int = typer.Option(4, help="API target: requests in flight at once."),
    api_timeout: float = typer.Option(60.0, help="API target: seconds per request attempt."),
    api_retries: int = typer.Option(4, help="API target: retries on 429 / 5xx / timeouts, with backoff."),
    candidates: Path = typer.Option(..., help="Candidate records: JSONL, CSV, parquet, or a Hugging Face dataset "
                                              "hf:NAME[:CONFIG][@SPLIT] (a hub id, a local folder in hub layout or "
                                              "saved with save_to_disk; also every other record option); "
                                              "meta.is_member, if present on every record, is used as ground truth "
                                              "for metrics."),
    population: Optional[Path] = typer.Option(None, help="Population records (known non-members, drawn like the "
                                                          "candidates): the references train on one part, the "
                                                          "verdict's null sample is the other; must exclude every "
                                                          "candidate."),
    background: Optional[Path] = typer.Option(None, help="Records (JSONL) every trained reference also trains on: "
                                                          "the target's background set, when known; must exclude "
                                                          "every candidate and population record."),
    references: List[str] = typer.Option([], help="Existing reference students (trained without the candidates)."),
    train_references: int = typer.Option(4, help="References to train when --references is not given."),
    base_model: Optional[str] = typer.Option(None, help="What the target was initialised from (references "
                                                        "start here; also the base for ratio attacks); default: "
                                                        "the config's base_model."),
    config: Optional[Path] = typer.Option(None, help="Study YAML whose recipe (training, teacher, signals, "
                                                     "attacks) the references use: the target's."),
    preset: Optional[str] = typer.Option(None, help="Preset the recipe starts from (default: default)."),
    teacher: Optional[str] = typer.Option(None, help="The references' teacher, as the target's: self (the frozen "
                                                     "base), prepared, restated, or a model reference. Without "
                                                     "--teacher, --config or --preset: self."),
    out: Path = typer.Option(Path("runs/audit"), help="Audit run directory."),
    set_: List[str] = typer.Option([], "--set", help="Override audit settings: training.*, signals.*, ..."),
    redact: bool = typer.Option(False, help="Redact privileged texts in the report."),
    force: List[str] = typer.Option([], help="Redo a stage and everything after it (or 'all'). Repeatable."),
    null_sample: Optional[Path] = typer.Option(None, help="Known non-members (JSONL) that no reference trains on: "
                                                           "the verdict's null sample. Default: split one off "
                                                           "--population (--null-size)."),
    null_size: int = typer.Option(0, help="Population records split off as the null sample (0 = 99, enough for "
                                          "p = 0.01, or half the population when it is smaller). Costs sampling and "
                                          "scoring only."),
    fdr: float = typer.Option(0.1, help="False discovery rate of the flagged list (Benjamini-Hochberg)."),
    fpr: Optional[float] = typer.Option(None, help="Flag each candidate with p <= FPR instead of a BH list."),
    prompt_column: Optional[str] = typer.Option(None, help="Column holding the prompt (default: prompt)."),
    privileged_column: Optional[str] = typer.Option(None, help="Column holding the privileged text (default: "
                                                               "privileged)."),
    id_column: Optional[str] = typer.Option(None, help="Column holding the record id (default: record_id, else a "
                                                       "content hash)."),
    domain: Optional[str] = typer.Option(None, help="Domain of rows without a domain column (default: general)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate everything, write nothing, print the plan and "
                                                          "its cost (as run-study --dry-run)."),
    gpu: str = typer.Option("H100", help="--dry-run: the GPU class to estimate on."),
) -> None:
    """Score each candidate record for membership in a deployed student's teacher data (an audit is a study
    with the target given and references that never saw a candidate; rerunning resumes it)."""
    from leakaudit.audit import AuditRequest, audit_config, recipe_sources
    from leakaudit.study import Study


    req = AuditRequest(target=target, candidates=candidates, population=population, background=background,
                       references=list(references),
                       n_train_references=train_references, base_model=base_model, out=out, overrides=list(set_),
                       config=config, preset=preset, teacher=teacher, redact=redact, target_model=target_model,
                       api_key_env=api_key_env, api_concurrency=api_concurrency, api_timeout_s=api_timeout,
                       api_max_retries=api_retries, force=list(force), null_sample=null_sample,
                       null_size=null_size, fdr=fdr, fpr=fpr, prompt_column=prompt_column,
                       privileged_column=privileged_column, id_column=id_column, domain=domain)
    # an audit is the study pipeline run on the audit's design (leakaudit.audit.audit_config)
    study = Study(audit_config(req), force=req.force, log=lambda m: typer.echo(m, err=True), redact=req.redact,
                  recipe_sources=recipe_sources(req))
    if dry_run:
        from leakaudit.cost import dry_run as plan_cost

        typer.echo(plan_cost(study, gpu=gpu))
        return
    study.run_all()
    table_path = study.run.candidates_csv
    _print_recipe(table_path.parent)
    _print_verdict(table_path.parent)
    typer.echo(f"per-candidate scores: {table_path}")


def _print_recipe(root: Path) -> None:
    """The references' recipe, as audit.json records it (leakaudit.audit.recipe_line)."""
    import json

    from leakaudit.audit import recipe_line

    path = Path(root) / "audit.json"
    recipe = json.loads(path.read_text(encoding="utf-8")).get("reference_recipe") if path.is_file() else None
    if recipe:
        typer.echo(recipe_line(recipe))


def _print_verdict(root: Path) -> None:
    """The audit's verdict, as audit.json records it (leakaudit.verdict.verdict_sentences)."""
    path = Path(root) / "audit.json"
    verdict = json.loads(path.read_text(encoding="utf-8")).get("verdict") if path.is_file() else None
    if verdict:
        typer.echo("verdict: " + verdict["headline"])
        for line in verdict["details"]:
            typer.echo("  " + line)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A finished run directory."),
           redact: bool = typer.Option(False, help="Replace privileged texts with [redacted]."),
           n_boot: int = typer.Option(1000, help="Bootstrap resamples of every CI."), seed: int = typer.Option(0),
           n_perm: Optional[int] = typer.Option(None, min=0, help="Relabellings of the blind text null (seeded by "
                                                "--seed); default 50, or 20 per domain where that is more.")
           ) -> None:
    """Rebuild metrics and the HTML report from stored scores, one line per step on stderr (a bar on a terminal)."""
    from leakaudit.errors import InputError
    from leakaudit.report import build_report
    from leakaudit.report.steps import ReportSteps

    if not (run_dir / "scores.parquet").is_file():
        raise InputError("no scores.parquet (run the study's attacks stage first)", path=str(run_dir))
    path = build_report(run_dir, redact=redact, n_boot=n_boot, seed=seed, n_perm=n_perm, steps=ReportSteps())
    _print_headline(run_dir)
    typer.echo(f"report: {path}")


@app.command()
def pool(runs: List[Path] = typer.Argument(..., help="Finished shards of one study (run-study --domain)."),
         out: Path = typer.Option(..., help="The pooled run directory (new, or a pool of the same shards)."),
         n_boot: int = typer.Option(1000), seed: int = typer.Option(0),
         n_perm: int = typer.Option(100, min=0, help="Relabellings of the blind text null (seeded by --seed).")
         ) -> None:
    """Join single-domain runs of one study into one run with a pooled report (leakaudit.pool)."""
    from leakaudit.pool import pool_runs

    path = pool_runs(out, runs, n_boot=n_boot, seed=seed, n_perm=n_perm)
    _print_headline(out)
    typer.echo(f"report: {path}")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors (bad input, mistyped commands and options) print one line and exit 2;
    failed jobs of a stage (leakaudit.executors.JobsFailed) print one line each and exit 1."""
    try:
        app(args=argv, prog_name="leakaudit", standalone_mode=False)
    except LeakauditError as e:
        typer.echo(f"error: {' '.join(str(e).split())}", err=True)
        return 2
    except JobsFailed as e:  # jobs that raised or whose worker died: each named; a rerun redoes only those
        typer.echo(f"error: {e}", err=True)
        return 1
    except (typer.Abort, click.exceptions.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except (typer.Exit, click.exceptions.Exit) as e:
        return e.exit_code
    except _no_args_classes():  # bare `leakaudit`: the help is already printed
        return 2
    except _usage_error_classes() as e:  # typer's and click's usage errors: no such option/command, bad value
        typer.echo(f"error: {_usage_message(e)}", err=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
