"""Usage errors of every subcommand exit 2 with one line `error: ...` and no traceback.

typer vendors its own click (typer._click), whose exceptions are not click's: these tests go through
`leakaudit.cli.main` exactly as the console script does, so a usage error that escapes as an exception fails here.
"""

from __future__ import annotations

import pytest

from leakaudit.cli import main


def _run(capsys, argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {err!r}"
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in err
    return lines[0]


USAGE_ERRORS = [
    # (argv, a fragment of the message)
    (["nosuchcmd"], "No such command 'nosuchcmd'"),
    (["--nosuchflag"], "--nosuchflag"),
    (["records", "--sourc", "champ"], "--sourc"),
    (["records", "--limit", "many", "--source", "champ"], "--limit"),
    (["records", "--out"], "--out"),
    (["plan"], "Missing option '--records'"),
    (["plan", "--records", "r.jsonl"], "Missing option '--out'"),
    (["plan", "--records", "r.jsonl", "--out", "o", "--n-candidates", "abc"], "--n-candidates"),
    (["plan", "--records", "r.jsonl", "--out", "o", "--n-candidates", "5"], "even number >= 4"),
    (["plan", "--records", "r.jsonl", "--out", "o", "--n-candidates", "2"], "even number >= 4"),
    (["plan", "--records", "r.jsonl", "--out", "o", "--bogus"], "--bogus"),
    (["train"], "Missing option '--plan'"),
    (["train", "--plan", "p", "--model"], "--model"),
    (["attacks", "--verbose"], "--verbose"),
    (["attacks", "extra"], "unexpected extra argument"),
    (["run-study", "--force"], "requires an argument"),
    (["run-study", "--presett", "tiny"], "--presett"),
    (["audit"], "Missing option '--target'"),
    (["audit", "--target", "t"], "Missing option '--candidates'"),
    (["audit", "--target", "t", "--candidates", "c.jsonl", "--train-references", "four"], "--train-references"),
    (["audit", "--target", "t", "--candidates", "c.jsonl", "--teacher"], "--teacher"),
    (["audit", "--target", "t", "--candidates", "c.jsonl", "--teacher", "prepard"], "--teacher 'prepard'"),
    (["audit", "--target", "t", "--candidates", "c.jsonl", "--preset", "defualt"], "--preset 'defualt'"),
    (["audit", "--target", "t", "--candidates", "c.jsonl", "--config", "none.yaml"], "--config: no such file"),
    (["report"], "Missing argument"),
    (["report", "a", "b"], "unexpected extra argument"),
    (["report", "run", "--n-boot", "x"], "--n-boot"),
    (["pool"], "Missing argument"),
    (["pool", "a", "b"], "Missing option '--out'"),
    (["pool", "a", "--out", "o"], "at least two run directories"),
    (["pool", "a", "b", "--out", "o"], "a: not a run directory"),
    (["run-study", "--preset", "cpu-full", "--domain", "chess"], "--domain chess: not a domain"),
]


@pytest.mark.parametrize("argv,needle", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_error_exits_2_with_one_line(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)  # nothing may be written, and relative paths land here
    code, out, err = _run(capsys, argv)
    assert code == 2, (out, err)
    line = _one_error_line(err)
    assert needle.lower() in line.lower()
    assert not any(tmp_path.iterdir())


def test_every_subcommand_is_covered():
    from leakaudit.cli import app

    import typer.main

    commands = set(typer.main.get_command(app).commands)
    covered = {argv[0] for argv, _ in USAGE_ERRORS}
    assert commands <= covered, commands - covered


@pytest.mark.parametrize("value,needle", [
    ("!!python/object:os.system", "not plain YAML"),
    ("!!python/name:os.system", "not plain YAML"),
    ("[1,", "not plain YAML"),
    ("{a: 1", "not plain YAML"),
])
def test_records_option_value_that_is_not_plain_yaml_exits_2(tmp_path, monkeypatch, capsys, value, needle):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, ["records", "--source", "champ", "--option", f"key={value}"])
    assert code == 2
    line = _one_error_line(err)
    assert needle in line and "--option key" in line


def test_records_option_without_equals_exits_2(capsys):
    code, _, err = _run(capsys, ["records", "--source", "champ", "--option", "key"])
    assert code == 2 and "key=value" in _one_error_line(err)


def test_python_tag_in_option_is_never_executed(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "executed"
    monkeypatch.chdir(tmp_path)
    value = f"!!python/object/apply:os.system ['touch {marker}']"
    code, _, err = _run(capsys, ["records", "--source", "champ", "--option", f"key={value}"])
    assert code == 2 and not marker.exists()
    _one_error_line(err)


def test_report_help_shows_the_redaction_marker(capsys):
    code, out, _ = _run(capsys, ["report", "--help"])
    assert code == 0
    assert "[redacted]" in " ".join(out.split())


def test_preset_help_lists_every_preset(capsys):
    from leakaudit.config import PRESETS

    code, out, _ = _run(capsys, ["run-study", "--help"])
    assert code == 0
    text = " ".join(out.split())
    for name in PRESETS:
        assert name in text, name
    from leakaudit.cli import _preset_names

    assert set(_preset_names()) == set(PRESETS)
