"""The `file` source (user JSONL / CSV / parquet) and the validation errors users see."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from leakaudit.data.records import Record, read_jsonl, write_jsonl
from leakaudit.data.sources import load_source
from leakaudit.errors import ConfigError, InputError

DATA = Path(__file__).parent / "data"
MAPPING = {"prompt": "question", "privileged": "solution", "answer": "final"}


def test_csv_with_column_mapping_and_default_domain():
    records = load_source("file", path=DATA / "user_records.csv", columns={**MAPPING, "record_id": "id"},
                          domain="quiz")
    assert [r.record_id for r in records] == ["u1", "u2", "u3"]
    r = records[1]
    assert (r.domain, r.prompt, r.privileged, r.answer) == (
        "quiz", "Name the capital of France, please.", "The capital of France is Paris.", "Paris")
    assert r.source == "file:user_records.csv"


def test_jsonl_skips_blank_lines_and_stringifies_answers():
    records = load_source("file", path=DATA / "user_records.jsonl", columns=MAPPING)
    assert [r.answer for r in records] == ["56", "Paris", "9"]
    assert all(r.domain == "general" for r in records)
    assert records[0].record_id == Record("general", "What is 7 times 8?", "7 times 8 is 56.").record_id


def test_parquet_reads_the_same_records_as_csv(tmp_path):
    frame = pd.read_csv(DATA / "user_records.csv", dtype=str)
    frame.to_parquet(tmp_path / "r.parquet")
    from_parquet = load_source("file", path=tmp_path / "r.parquet", columns=MAPPING)
    from_csv = load_source("file", path=DATA / "user_records.csv", columns=MAPPING)
    assert [r.to_dict() | {"source": ""} for r in from_parquet] == [r.to_dict() | {"source": ""} for r in from_csv]


def test_empty_csv_cell_names_file_line_and_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("question,solution\nq1,s1\nq2,s2\nq3,\n")
    with pytest.raises(InputError) as err:
        load_source("file", path=path, columns=MAPPING)
    message = str(err.value)
    assert "bad.csv" in message and "line 4" in message and "field 'solution'" in message and "is empty" in message
    assert "record field 'privileged'" in message


def test_missing_jsonl_key_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "p1", "privileged": "s1"}\n\n{"prompt": "p2"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl, line 3, field 'privileged': missing"):
        load_source("file", path=path)


def test_missing_csv_column_is_reported_before_reading_rows(tmp_path):
    path = tmp_path / "cols.csv"
    path.write_text("question,answer\nq,a\n")
    with pytest.raises(InputError, match=r"cols.csv, field 'privileged': column 'solution' not found "
                                         r"\(columns: question, answer\)"):
        load_source("file", path=path, columns=MAPPING)


def test_unknown_record_field_in_mapping_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown record fields \\['rationale'\\]"):
        load_source("file", path=DATA / "user_records.csv", columns={"rationale": "solution"})


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_non_utf8_bytes_name_the_line(tmp_path, suffix):
    path = tmp_path / f"latin1{suffix}"
    if suffix == ".jsonl":
        good = b'{"prompt": "p1", "privileged": "s1"}\n'
        path.write_bytes(good + b'{"prompt": "caf\xe9", "privileged": "s2"}\n')
        expected_line = 2
    else:
        path.write_bytes(b"prompt,privileged\np1,s1\np2,s2\ncaf\xe9,s3\n")
        expected_line = 4
    with pytest.raises(InputError, match=rf"latin1{suffix}, line {expected_line}: not valid UTF-8"):
        load_source("file", path=path)


def test_duplicate_record_ids_name_the_file_record_and_field(tmp_path):
    path = tmp_path / "dupes.csv"
    path.write_text("record_id,prompt,privileged\nr1,p1,s1\nr2,p2,s2\nr1,p3,s3\n")
    with pytest.raises(InputError, match=r"dupes.csv, record r1, field 'record_id': duplicate record_id "
                                         r"\(first seen at record #1, again at #3\)"):
        load_source("file", path=path)


def test_records_over_the_token_budget_are_rejected(tmp_path, tokenizer):
    path = tmp_path / "long.jsonl"
    path.write_text('{"record_id": "short", "prompt": "Hi", "privileged": "Hello"}\n'
                    '{"record_id": "long", "prompt": "Hi", "privileged": "' + "word " * 40 + '"}\n')
    assert len(load_source("file", path=path, tokenizer=tokenizer, max_tokens=64)) == 2
    with pytest.raises(InputError, match=r"long.jsonl, record long, field 'privileged': has \d+ tokens, over the "
                                         r"budget of 10"):
        load_source("file", path=path, tokenizer=tokenizer, max_tokens=10)
    with pytest.raises(ConfigError, match="max_tokens needs a tokenizer"):
        load_source("file", path=path, max_tokens=10)


def test_missing_file_and_unsupported_type(tmp_path):
    with pytest.raises(InputError, match="absent.csv: no such file"):
        load_source("file", path=tmp_path / "absent.csv")
    odd = tmp_path / "records.txt"
    odd.write_text("prompt\n")
    with pytest.raises(InputError, match="records.txt: unsupported file type"):
        load_source("file", path=odd)


@pytest.mark.parametrize("name", ["champ", "humaneval", "medical"])
def test_offline_records_round_trip_through_jsonl(tmp_path, name):
    records = load_source(name, limit=25, seed=3)
    write_jsonl(records, tmp_path / "records.jsonl")
    assert read_jsonl(tmp_path / "records.jsonl") == records
    again = load_source("file", path=tmp_path / "records.jsonl")
    assert [r.record_id for r in again] == [r.record_id for r in records]
    assert [r.meta for r in again] == [r.meta for r in records]
