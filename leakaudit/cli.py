"""The `leakaudit` command line. Every command only calls library stages; errors in user input exit with 2.

    leakaudit records --source champ --limit 20
    leakaudit plan --records recs.jsonl --out runs/x [--preset tiny] [--set key=value ...]
    leakaudit train --plan runs/x --model-id math-s0 | --all
    leakaudit attacks
    leakaudit run-study [--config study.yaml] [--preset default] [--set key=value ...] [--force STAGE]
    leakaudit audit --target DIR_OR_HUB_ID --candidates FILE --population FILE [--references DIR ...]
    leakaudit report RUN_DIR [--redact]
    leakaudit pool RUN_DIR RUN_DIR ... --out POOLED_DIR

This module is the parser: each command's options and help, and a body that calls the library. Beside it:
cli_exit (exit codes and the one-line error), cli_summary (what a finished run prints), cli_records (the records
command's --option parsing and file checks); the audit's flags come from leakaudit.audit_options.
It stays one module of about 400 lines because typer reads a command's options from its function's signature: the
eight commands' signatures and help texts are the CLI's surface, and each body is a few calls into the library.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from leakaudit.audit_options import flag_for
from leakaudit.cli_exit import run_app
from leakaudit.cli_records import admit_file_records, parse_options
from leakaudit.cli_summary import print_audit_summary, print_headline
from leakaudit.errors import InputError, LeakauditError

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


def _preset_names() -> list[str]:
    """The shipped presets (leakaudit.presets.preset_names, the one list), default first; that module imports nothing
    heavy, so `--help` does not import the config module (and torch)."""
    from leakaudit.presets import preset_names

    return list(preset_names())


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
    options = parse_options(option)
    check_source_options(source, options, where="--option")  # as run-study checks data.domains.<d>.options
    recs = load_source(source, limit=limit, seed=seed, **options)
    if source == "file":
        admit_file_records(recs, options, config=config, preset=preset, whole_file=limit is None)
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


@app.command()
def plan(
    records_file: List[Path] = typer.Option(..., "--records", help="Records of one domain (JSONL, CSV, parquet): "
                                                                  "the domain's pool. Repeatable, one file per "
                                                                  "domain."),
    out: Path = typer.Option(..., help="The run directory (study.yaml, records.jsonl, membership.parquet, "
                                       "plan.json): `leakaudit train --plan OUT` trains its models."),
    config: Optional[Path] = typer.Option(None, help="Study YAML the rest of the run's config comes from."),
    preset: Optional[str] = typer.Option(None, help=f"A shipped preset: {' | '.join(_preset_names())}."),
    set_: List[str] = typer.Option([], "--set", help="Override: dotted.key=value (YAML value). Repeatable."),
    n_students: Optional[int] = typer.Option(None, help="plan.n_students: students per domain (even, >= 4)."),
    n_candidates: Optional[int] = typer.Option(None, help="data.n_candidates: candidates per domain (even, >= 4)."),
    n_population: Optional[int] = typer.Option(None, help="data.n_population: population records per domain."),
    null_student: Optional[bool] = typer.Option(None, help="plan.null_student: a null student per domain."),
    n_null_students: Optional[int] = typer.Option(None, help="plan.n_null_students: null students per domain "
                                                             "(each another draw of labels for the null check)."),
    keep_design: Optional[str] = typer.Option(None, help="plan.keep_design: 'lira' (random halves) or "
                                                         "'balanced_subsets'."),
    seed: Optional[int] = typer.Option(None, help="The master seed."),
) -> None:
    """Write a seeded membership plan: run-study's records and plan stages on your records files (the same plan
    builder, the same checks), stopping after the plan. The run directory it writes is where `leakaudit train`
    starts; `leakaudit run-study --out OUT` with the same config goes on from it."""
    from leakaudit.membership import check_n_candidates

    if n_candidates is not None:  # the rule run-study applies to data.n_candidates, named by this flag
        check_n_candidates(n_candidates, field="--n-candidates")
    overrides = [*set_, *_plan_overrides(records_file)]
    for key, value in (("plan.n_students", n_students), ("data.n_candidates", n_candidates),
                       ("data.n_population", n_population), ("plan.null_student", null_student),
                       ("plan.n_null_students", n_null_students), ("plan.keep_design", keep_design),
                       ("seed", seed)):
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    overrides += [f"out_root={json.dumps(str(out.parent))}", f"name={json.dumps(out.name)}"]
    from leakaudit.config import load_config
    from leakaudit.study import Study

    cfg = load_config(config, preset=preset, overrides=overrides)
    study = Study(cfg, log=lambda m: typer.echo(m, err=True))
    study.run_all(until="plan")
    p = study.plan()
    typer.echo(f"plan ({p.design}, seed {p.seed}): {len(p.models)} models, "
               f"{sum(map(len, p.candidates.values()))} candidates -> {out}")


def _plan_overrides(files: List[Path]) -> list[str]:
    """`data.domains=...`: one domain per --records file, named after its records' domain (read here, so a file
    of two domains is refused naming both; records are never relabelled)."""
    from leakaudit.data.sources import load_source

    domains: dict[str, dict] = {}
    for path in files:
        found = sorted({r.domain for r in load_source("file", path=str(path))})
        if len(found) != 1:
            raise InputError(f"holds records of domains {found}; give one --records file per domain", path=str(path))
        if found[0] in domains:
            raise InputError(f"domain '{found[0]}' is also in {domains[found[0]]['options']['path']}; give one "
                             "--records file per domain", path=str(path))
        domains[found[0]] = {"source": "file", "options": {"path": str(Path(path).resolve())}}
    return [f"data.domains={json.dumps(domains)}"]


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
        raise LeakauditError(f"{plan_dir}: no study.yaml (create the run with `leakaudit run-study` or "
                             "`leakaudit plan` first)")
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
                study.run_stage("teacher")
                study.run_stage("students")
            finally:
                study.close()
    elif model_id:
        if model_id not in p.models:
            raise LeakauditError(f"{plan_dir}: model_id '{model_id}' is not in the plan ({sorted(p.models)})")
        study.run_stage("teacher")
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
    print_headline(root)
    typer.echo(f"\nwall time {time.time() - start:.0f} s; report: {root / 'report.html'}")


def _audit_flag(field: str) -> str:
    """The flag of the audit config's key `audit.<field>` (leakaudit.audit_options); the option's parameter is
    named `field`, as the key."""
    return flag_for(f"audit.{field}")


@app.command()
def audit(
    target: str = typer.Option(..., _audit_flag("target"),
                               help="The deployed student: a directory or hub id, or an OpenAI-compatible server's "
                                    "base URL (http://HOST:PORT/v1; with --target-model)."),
    target_model: Optional[str] = typer.Option(None, _audit_flag("target_model"),
                                               help="API target: the served model's name."),
    api_key_env: Optional[str] = typer.Option(None, _audit_flag("api_key_env"),
                                              help="API target: environment variable holding the API key (default: "
                                                   "OPENAI_API_KEY when set; '' = no key). The key is never logged "
                                                   "or written."),
    api_concurrency: int = typer.Option(4, _audit_flag("api_concurrency"),
                                        help="API target: requests in flight at once."),
    api_timeout_s: float = typer.Option(60.0, _audit_flag("api_timeout_s"),
                                        help="API target: seconds per request attempt."),
    api_max_retries: int = typer.Option(4, _audit_flag("api_max_retries"),
                                        help="API target: retries on 429 / 5xx / timeouts, with backoff."),
    candidates: Path = typer.Option(..., _audit_flag("candidates"),
                                    help="Candidate records: JSONL, CSV, parquet, or a Hugging Face dataset "
                                         "hf:NAME[:CONFIG][@SPLIT] (a hub id, a local folder in hub layout or saved "
                                         "with save_to_disk; also every other record option); meta.is_member, if "
                                         "present on every record, is used as ground truth for metrics."),
    population: Optional[Path] = typer.Option(None, _audit_flag("population"),
                                              help="Population records (known non-members, drawn like the "
                                                   "candidates): the references train on one part, the verdict's "
                                                   "null sample is the other; must exclude every candidate."),
    background: Optional[Path] = typer.Option(None, _audit_flag("background"),
                                              help="Records (JSONL) every trained reference also trains on: the "
                                                   "target's background set, when known; must exclude every "
                                                   "candidate and population record."),
    references: List[str] = typer.Option([], _audit_flag("references"),
                                         help="Existing reference students (trained without the candidates)."),
    n_references: int = typer.Option(4, _audit_flag("n_references"),
                                     help="References to train when --references is not given."),
    base_model: Optional[str] = typer.Option(None, help="What the target was initialised from (references "
                                                        "start here; also the base for ratio attacks); default: "
                                                        "the config's base_model."),
    config: Optional[Path] = typer.Option(None, help="Study YAML whose recipe (training, teacher, signals, "
                                                     "attacks) the references use: the target's."),
    preset: Optional[str] = typer.Option(None, help="Preset the recipe starts from (default: default)."),
    teacher: Optional[str] = typer.Option(None, help="The references' teacher, as the target's: self (the frozen "
                                                     "base), prepared, restated, plan, or a model reference. Without "
                                                     "--teacher, --config or --preset: self."),
    out: Path = typer.Option(Path("runs/audit"), help="Audit run directory."),
    set_: List[str] = typer.Option([], "--set", help="Override audit settings: training.*, signals.*, ..."),
    redact: bool = typer.Option(False, help="Redact privileged texts in the report."),
    force: List[str] = typer.Option([], help="Redo a stage and everything after it (or 'all'). Repeatable."),
    null_sample: Optional[Path] = typer.Option(None, _audit_flag("null_sample"),
                                               help="Known non-members (JSONL) that no reference trains on: the "
                                                    "verdict's null sample. Default: split one off --population "
                                                    "(--null-size)."),
    null_size: int = typer.Option(0, _audit_flag("null_size"),
                                  help="Population records split off as the null sample (0 = 99, enough for p = "
                                       "0.01, or half the population when it is smaller). Costs sampling and "
                                       "scoring only."),
    fdr: float = typer.Option(0.1, _audit_flag("fdr"),
                              help="False discovery rate of the flagged list (Benjamini-Hochberg)."),
    fpr: Optional[float] = typer.Option(None, _audit_flag("fpr"),
                                        help="Flag each candidate with p <= FPR instead of a BH list."),
    prompt_column: Optional[str] = typer.Option(None, _audit_flag("prompt_column"),
                                                help="Column holding the prompt (default: prompt)."),
    privileged_column: Optional[str] = typer.Option(None, _audit_flag("privileged_column"),
                                                    help="Column holding the privileged text (default: "
                                                         "privileged)."),
    id_column: Optional[str] = typer.Option(None, _audit_flag("id_column"),
                                            help="Column holding the record id (default: record_id, else a content "
                                                 "hash)."),
    domain: Optional[str] = typer.Option(None, _audit_flag("domain"),
                                         help="Domain of rows without a domain column (default: general)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate everything, write nothing, print the plan and "
                                                          "its cost (as run-study --dry-run)."),
    gpu: str = typer.Option("H100", help="--dry-run: the GPU class to estimate on."),
) -> None:
    """Score each candidate record for membership in a deployed student's teacher data (an audit is a study
    with the target given and references that never saw a candidate; rerunning resumes it)."""
    from leakaudit.audit import AuditRequest, audit_config, recipe_sources
    from leakaudit.pipeline.audit_design import DisjointAuditDesign
    from leakaudit.pipeline.runner import Runner

    req = AuditRequest(target=target, candidates=candidates, population=population, background=background,
                       references=list(references), n_references=n_references, base_model=base_model, out=out,
                       overrides=list(set_), config=config, preset=preset, teacher=teacher, redact=redact,
                       target_model=target_model, api_key_env=api_key_env, api_concurrency=api_concurrency,
                       api_timeout_s=api_timeout_s, api_max_retries=api_max_retries, force=list(force),
                       null_sample=null_sample, null_size=null_size, fdr=fdr, fpr=fpr, prompt_column=prompt_column,
                       privileged_column=privileged_column, id_column=id_column, domain=domain)
    # the request as a config (leakaudit.audit), run by the pipeline with the audit's design
    study = Runner(audit_config(req), DisjointAuditDesign(recipe_sources(req)), force=req.force,
                   log=lambda m: typer.echo(m, err=True), redact=req.redact)
    if dry_run:
        from leakaudit.cost import dry_run as plan_cost

        typer.echo(plan_cost(study, gpu=gpu))
        return
    study.run_all()
    table_path = study.run.candidates_csv
    print_audit_summary(table_path.parent)
    typer.echo(f"per-candidate scores: {table_path}")


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
    print_headline(run_dir)
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
    print_headline(out)
    typer.echo(f"report: {path}")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: the command's exit code (leakaudit.cli_exit: 2 for bad input or a mistyped command,
    1 for failed jobs), errors as one line."""
    return run_app(app, argv)


if __name__ == "__main__":
    sys.exit(main())
