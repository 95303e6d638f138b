"""What the CLI prints when a run is done, read back from the run directory's files.

    print_headline(root)       run-study, report, pool: the mean per-target AUROC table, the blind text check and
                               the teacher's literalness
    print_audit_summary(root)  audit: the references' recipe and the verdict (audit.json)

Everything is imported when printed, not when the CLI starts, so `--help` and usage errors stay fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def print_headline(root: Path) -> None:
    _print_mean_target(root)
    _print_blind_check(root)
    _print_teacher(root)


def print_audit_summary(root: Path) -> None:
    _print_recipe(root)
    _print_verdict(root)


def _print_mean_target(root: Path) -> None:
    """The headline of metrics.json (leakaudit.per_target.headline_table): per domain, Leaky against the best OUT-only
    baseline by mean per-target AUROC with the paired difference, the online attacks beside it; nothing for a report
    without labels or one that predates the statistic."""
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


def _print_recipe(root: Path) -> None:
    """The references' recipe, as audit.json records it (leakaudit.pipeline.audit_plan.recipe_line)."""
    from leakaudit.pipeline.audit_plan import recipe_line

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
