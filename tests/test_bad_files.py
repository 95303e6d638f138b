"""Unreadable record files, scores tables and source option values: exit 2 naming the file / line / option,
never a traceback, and nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fake_run import write_fake_run
from leakaudit.cli import main
from leakaudit.config import load_config
from leakaudit.data.sources import check_source_options, load_source
from leakaudit.errors import ConfigError, InputError


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# ---- record files the `file` source cannot parse -------------------------------------------------------------
BAD_FILES = {
    # name: (content, line the error names or None, words of the message)
    "empty.csv": (b"", None, "is empty"),
    "extra_field.csv": (b"prompt,privileged\nQ1,S1\nQ2,S2,surplus\n", 3, "Expected 2 fields in line 3, saw 3"),
    "corrupt.parquet": (b"PAR1 this is not a parquet file", None, "is not a readable parquet file"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_unparseable_record_file_is_an_input_error_naming_it(tmp_path, name):
    content, line, needle = BAD_FILES[name]
    src = tmp_path / name
    src.write_bytes(content)
    with pytest.raises(InputError, match=re.escape(needle)) as info:
        load_source("file", path=src)
    assert info.value.path == str(src) and info.value.line == line
    if line is not None:
        assert str(info.value).startswith(f"{src}, line {line}: ")


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_records_command_exits_2_on_an_unparseable_file_and_writes_nothing(tmp_path, capsys, name):
    content, line, needle = BAD_FILES[name]
    src = tmp_path / name
    src.write_bytes(content)
    out = tmp_path / "out.jsonl"
    rc = main(["records", "--source", "file", "-o", f"path={src}", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and str(src) in err and needle in err and "Traceback" not in err
    assert not out.exists()


# ---- option values ------------------------------------------------------------------------------------------
@pytest.fixture
def good_csv(tmp_path) -> Path:
    src = tmp_path / "good.csv"
    src.write_text("prompt,privileged\nQ1,S1\n", encoding="utf-8")
    return src


@pytest.mark.parametrize("options,needle", [
    ({"columns": 5}, "options.columns: expected"),
    ({"columns": {"prompt": 1}}, "options.columns['prompt']: expected"),
    ({"domain": ["a"]}, "options.domain: expected str"),
])
def test_a_file_option_of_the_wrong_type_is_a_config_error_naming_it(good_csv, options, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_source("file", path=good_csv, **options)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        check_source_options("file", {"path": str(good_csv), **options})


def test_a_path_that_is_not_a_string_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=re.escape("options.path: expected str | Path | None, got 123 (int)")):
        load_source("file", path=123)
    with pytest.raises(ConfigError, match=re.escape("options.tables: expected")):
        check_source_options("medical", {"tables": "thyroid"})  # a list of table names, not one string
    with pytest.raises(ConfigError, match=re.escape("options.limit: expected")):
        load_source("humaneval", limit="5")


@pytest.mark.parametrize("options,needle", [
    ("{path: good.csv, columns: 5}", "data.domains.code.options.columns: expected"),
    ("{path: 123}", "data.domains.code.options.path: expected"),
])
def test_a_study_config_names_the_option_of_the_wrong_type(tmp_path, options, needle):
    f = tmp_path / "study.yaml"
    f.write_text(f"preset: tiny\ndata:\n  domains:\n    code: {{source: file, options: {options}}}\n")
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_config(f)


@pytest.mark.parametrize("extra,needle", [
    (["-o", "bogus=1"], "--option.bogus: unknown option for source 'file'"),
    (["-o", "columns=5"], "--option.columns: expected"),
    (["-o", "domain=[1, 2]"], "--option.domain: expected str"),
])
def test_records_command_checks_option_names_and_values(tmp_path, capsys, good_csv, extra, needle):
    out = tmp_path / "out.jsonl"
    rc = main(["records", "--source", "file", "-o", f"path={good_csv}", *extra, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err
    assert not out.exists()


def test_records_command_path_of_the_wrong_type_exits_2(tmp_path, capsys):
    rc = main(["records", "--source", "file", "-o", "path=123"])
    assert rc == 2 and "--option.path: expected" in capsys.readouterr().err


# ---- scores.parquet that is not a parquet file ----------------------------------------------------------------
def test_report_on_a_garbage_scores_table_exits_2_naming_it(tmp_path, capsys):
    run = write_fake_run(tmp_path / "run")
    (run / "scores.parquet").write_bytes(b"garbage, not parquet")
    before = _files(tmp_path)
    rc = main(["report", str(run)])
    err = capsys.readouterr().err
    assert rc == 2 and str(run / "scores.parquet") in err and "not a readable scores table" in err
    assert _files(tmp_path) == before


def test_pool_on_a_garbage_scores_table_exits_2_naming_it(tmp_path, capsys):
    from test_pool import write_shard

    code, math = write_shard(tmp_path / "a", "code"), write_shard(tmp_path / "b", "math")
    (math / "scores.parquet").write_bytes(b"garbage, not parquet")
    before = _files(tmp_path)
    rc = main(["pool", str(code), str(math), "--out", str(tmp_path / "pooled")])
    err = capsys.readouterr().err
    assert rc == 2 and str(math / "scores.parquet") in err and "not a readable scores table" in err
    assert _files(tmp_path) == before
