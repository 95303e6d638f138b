"""One table from each `leakaudit audit` flag to its config key (leakaudit.audit_options): the CLI declares its audit
options from it, every key of the audit section has its row, and errors about a key name the flag typed."""

from __future__ import annotations

import dataclasses

import pytest
import typer.main

from leakaudit.audit_config import AuditConfig
from leakaudit.audit_options import AUDIT_OPTIONS, flag_for, flag_named
from leakaudit.cli import app, main

CONFIG_FILE_ONLY = {"records_per_reference"}
"""Audit keys no flag sets (a config file only)."""


def _audit_command():
    return typer.main.get_command(app).commands["audit"]


def test_every_key_of_the_audit_section_has_one_flag():
    fields = {f.name for f in dataclasses.fields(AuditConfig)}
    keys = list(AUDIT_OPTIONS.values())
    assert len(keys) == len(set(keys))
    assert {k.removeprefix("audit.") for k in keys} == fields - CONFIG_FILE_ONLY
    assert all(k.startswith("audit.") for k in keys)


def test_the_cli_declares_each_flag_on_a_parameter_named_as_its_key_with_the_configs_default():
    params = {p.name: p for p in _audit_command().params}
    defaults = {f.name: f.default for f in dataclasses.fields(AuditConfig)
                if f.default is not dataclasses.MISSING}
    for flag, key in AUDIT_OPTIONS.items():
        name = key.removeprefix("audit.")
        assert name in params, f"{flag}: no audit option named {name}"
        assert params[name].opts == [flag], (name, params[name].opts)
        if name in defaults:
            assert params[name].default == defaults[name], name


@pytest.mark.parametrize("message, expected", [
    ("audit.n_references: must be >= 1, got 0", "--train-references: must be >= 1, got 0"),
    ("audit.api_timeout_s: must be > 0, got 0.0", "--api-timeout: must be > 0, got 0.0"),
    ("audit.target_model: required when audit.target is an API URL", "--target-model: required when --target is an "
                                                                      "API URL"),
    ("audit.background: only for references trained here (not with audit.references)",
     "--background: only for references trained here (not with --references)"),
    ("audit.records_per_reference: must be >= 0, got -1", "audit.records_per_reference: must be >= 0, got -1"),
    ("name: must be a non-empty run directory name", "--out .: must be a non-empty run directory name"),
    ("training.epochs=0: must be an int >= 1; see audit.json", "training.epochs=0: must be an int >= 1; see audit.json"),
])
def test_errors_name_the_flag_the_auditor_typed(message, expected):
    assert flag_named(message, ".") == expected


def test_flag_for_a_key():
    assert flag_for("audit.n_references") == "--train-references"
    assert flag_for("audit.api_max_retries") == "--api-retries"


@pytest.mark.parametrize("argv, line", [
    (["--api-timeout", "0"], "--api-timeout: must be > 0, got 0.0"),
    (["--api-retries", "-1"], "--api-retries: must be >= 0, got -1"),
    (["--api-concurrency", "0"], "--api-concurrency: must be >= 1, got 0"),
    (["--train-references", "0"], "--train-references: must be >= 1, got 0"),
    (["--target-model", "m"], "--target-model: only for an API target (--target set to http://HOST:PORT/v1)"),
    (["--fdr", "1.5"], "--fdr: must be in (0, 1), got 1.5"),
])
def test_a_bad_audit_flag_exits_2_naming_it_and_writes_nothing(argv, line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["audit", "--target", "some/model", "--candidates", "c.jsonl", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"error: {line}", err
    assert not any(tmp_path.iterdir())


def test_an_audit_section_in_a_config_file_names_its_keys():
    from leakaudit.config import validate_config
    from leakaudit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^audit\.api_timeout_s: must be > 0, got 0"):
        validate_config({"audit": {"target": "t", "candidates": "c.jsonl", "api_timeout_s": 0}})
