"""How a `leakaudit` command ends: its exit code, and one line `error: ...` instead of a traceback.

    0    done
    1    jobs of a stage failed (leakaudit.executors.JobsFailed: each named; a rerun redoes only those)
    2    bad input (leakaudit.errors.LeakauditError: the file, record and field named; nothing written), or a
         mistyped command, option or value (typer's and click's usage errors, with where to look)
    130  interrupted
"""

from __future__ import annotations

from typing import Sequence

import click
import typer

from leakaudit.errors import LeakauditError
from leakaudit.executors import JobsFailed


def run_app(app: typer.Typer, argv: Sequence[str] | None) -> int:
    """Run the typer `app` on `argv` (None: sys.argv) and return the exit code above."""
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
