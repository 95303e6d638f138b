"""An audit's record sources (leakaudit.data.audit_inputs): JSONL, CSV, parquet and Hugging Face datasets (a folder
written by save_to_disk, a local folder in the hub's layout), with a column mapping; a bad row is named by source,
line and field, the CLI exits 2 and writes nothing. No network."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from leakaudit.data.audit_inputs import ColumnMap, parse_hf, read_records
from leakaudit.errors import InputError

ROWS = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "solution": f"{i} + {i} = {2 * i}."} for i in range(4)]
COLUMNS = ColumnMap(prompt="question", privileged="solution", record_id="id", domain="math")


def _check(records, lines, first_line):
    assert [r.record_id for r in records] == ["q0", "q1", "q2", "q3"]
    assert records[2].prompt == "What is 2 + 2?" and records[2].privileged == "2 + 2 = 4."
    assert {r.domain for r in records} == {"math"}
    assert lines == [first_line + i for i in range(4)]


def test_csv_and_parquet_with_a_column_mapping(tmp_path):
    pd.DataFrame(ROWS).to_csv(tmp_path / "c.csv", index=False)
    _check(*read_records(tmp_path / "c.csv", COLUMNS), first_line=2)  # the header is line 1
    pd.DataFrame(ROWS).to_parquet(tmp_path / "c.parquet", index=False)
    _check(*read_records(tmp_path / "c.parquet", COLUMNS), first_line=1)


def test_jsonl_with_and_without_a_mapping(tmp_path):
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    _check(*read_records(tmp_path / "c.jsonl", COLUMNS), first_line=1)
    # without a mapping a JSONL file is read as leakaudit records: the same file is refused, naming line 1
    with pytest.raises(InputError, match=r"c\.jsonl, line 1.*field 'domain'|c\.jsonl, line 1"):
        read_records(tmp_path / "c.jsonl")


def test_saved_dataset_and_dataset_dict(tmp_path):
    import datasets

    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    _check(*read_records(str(tmp_path / "ds"), COLUMNS), first_line=1)  # a bare directory
    _check(*read_records(f"hf:{tmp_path / 'ds'}", COLUMNS), first_line=1)
    datasets.DatasetDict({"test": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "dd"))
    _check(*read_records(f"hf:{tmp_path / 'dd'}@test", COLUMNS), first_line=1)
    with pytest.raises(InputError, match=r"has no split 'train' \(splits: test\)"):
        read_records(f"hf:{tmp_path / 'dd'}", COLUMNS)


def test_local_folder_in_hub_layout(tmp_path):
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pd.DataFrame(ROWS).to_parquet(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet", index=False)
    _check(*read_records(f"hf:{tmp_path / 'hub'}@train", COLUMNS), first_line=1)


@pytest.mark.parametrize("kind", ["csv", "parquet", "saved"])
def test_a_bad_row_is_named_by_line_and_field(tmp_path, kind):
    rows = [dict(r) for r in ROWS]
    rows[2]["solution"] = "  "
    if kind == "csv":
        source, line = tmp_path / "c.csv", 4
        pd.DataFrame(rows).to_csv(source, index=False)
    elif kind == "parquet":
        source, line = tmp_path / "c.parquet", 3
        pd.DataFrame(rows).to_parquet(source, index=False)
    else:
        import datasets

        source, line = tmp_path / "ds", 3
        datasets.Dataset.from_list(rows).save_to_disk(str(source))
    with pytest.raises(InputError) as e:
        read_records(str(source), COLUMNS)
    assert f"{source}, line {line}" in str(e.value) and "field 'solution'" in str(e.value)


def test_a_missing_column_and_a_missing_source_are_named(tmp_path):
    pd.DataFrame(ROWS).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(InputError, match=r"column 'prompt' not found \(columns: id, question, solution\)"):
        read_records(tmp_path / "c.csv", ColumnMap(privileged="solution"))
    with pytest.raises(InputError, match=r"nope\.csv: no such file or directory"):
        read_records(tmp_path / "nope.csv", COLUMNS)
    assert parse_hf("hf:org/name:cfg@validation") == ("org/name", "cfg", "validation")
    assert parse_hf("hf:org/name") == ("org/name", None, "train")


def test_cli_audit_of_a_bad_csv_row_exits_2_and_writes_nothing(tmp_path, tiny_model_dir, capsys):
    from leakaudit.cli import main

    rows = [dict(r) for r in ROWS]
    pd.DataFrame(rows[:2]).to_csv(tmp_path / "cands.csv", index=False)
    pop = [{**r, "id": f"p{i}", "question": f"Name {i}?"} for i, r in enumerate(ROWS)]
    pop[1]["question"] = ""
    pd.DataFrame(pop).to_csv(tmp_path / "pop.csv", index=False)
    out = tmp_path / "run"
    code = main(["audit", "--target", str(tiny_model_dir), "--candidates", str(tmp_path / "cands.csv"),
                 "--population", str(tmp_path / "pop.csv"), "--prompt-column", "question", "--privileged-column",
                 "solution", "--id-column", "id", "--domain", "math", "--base-model", str(tiny_model_dir),
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"{tmp_path / 'pop.csv'}, line 3" in err and "field 'question'" in err, err
    assert not out.exists()


def test_version_flag(capsys):
    from leakaudit import __version__
    from leakaudit.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"leakaudit {__version__}\n"


def test_an_audit_prepares_from_a_hub_layout_folder_and_a_csv(tmp_path, tiny_model_dir):
    """The audit reads a Hugging Face dataset folder (candidates) and a CSV (population) with one column mapping; its
    null sample is split off the population. prepare() checks everything and writes nothing."""
    from leakaudit.audit import AuditRequest, audit_config
    from leakaudit.study import Study

    (tmp_path / "hub" / "data").mkdir(parents=True)
    pd.DataFrame(ROWS).to_parquet(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet", index=False)
    pop = [{"id": f"p{i}", "question": f"What is {i} times 3?", "solution": f"{i} * 3 = {3 * i}."} for i in range(8)]
    pd.DataFrame(pop).to_csv(tmp_path / "pop.csv", index=False)
    out = tmp_path / "run"
    req = AuditRequest(target=str(tiny_model_dir), candidates=Path(f"hf:{tmp_path / 'hub'}@train"),
                       population=tmp_path / "pop.csv", base_model=str(tiny_model_dir), out=out,
                       prompt_column="question", privileged_column="solution", id_column="id", domain="math",
                       n_references=2)
    study = Study(audit_config(req), log=lambda m: None, progress=False)
    study.prepare()
    plan = study.plan()
    assert plan.audit_candidates("math") == ["q0", "q1", "q2", "q3"]
    assert len(plan.null_sample("math")) == 4 and set(plan.null_sample("math")) <= {f"p{i}" for i in range(8)}
    assert not set(plan.null_sample("math")) & set(plan.population["math"])
    assert not out.exists()
    study.close()
