"""Offline record sources (champ, humaneval, medical), the registry and seeded subsets."""

from __future__ import annotations

import re

import pytest

from leakaudit.data.sources import available_sources, load_source
from leakaudit.errors import ConfigError

ALL_SOURCES = {"champ", "humaneval", "medical", "gsm8k", "math", "medqa", "medmcqa", "pubmedqa", "mbpp", "file"}


def test_available_sources_lists_every_contract_name_with_a_description():
    sources = available_sources()
    assert set(sources) == ALL_SOURCES
    assert all(isinstance(d, str) and len(d) > 10 for d in sources.values())


def test_unknown_source_is_a_config_error_naming_the_known_ones():
    with pytest.raises(ConfigError, match="unknown data source 'nope'.*champ"):
        load_source("nope")


def test_champ_has_270_problems_with_solution_only_in_privileged():
    records = load_source("champ")
    assert len(records) == 270 and len({r.record_id for r in records}) == 270
    first = next(r for r in records if r.meta["problem_id"] == "P_Combinatorics_1")
    assert first.domain == "math" and first.source == "champ" and first.answer == "239"
    assert "length 6 have adjacent digit" in first.prompt
    assert first.privileged.startswith("Step-wise solution:\n1. Let x_n, y_n, z_n")
    assert first.privileged.endswith("Final answer: 239")
    assert "x_6+y_6+z_6" not in first.prompt
    assert all(r.answer for r in records)


def test_humaneval_privileged_is_the_canonical_body_only_and_tests_are_dropped():
    records = load_source("humaneval")
    assert len(records) == 164
    r = next(r for r in records if r.meta["task_id"] == "HumanEval/0")
    assert r.meta["entry_point"] == "has_close_elements" and r.answer is None and r.domain == "code"
    assert "def has_close_elements(numbers: List[float], threshold: float) -> bool:" in r.prompt
    assert "distance = abs(elem - elem2)" not in r.prompt
    assert "Write only its body" in r.prompt
    # the body as the dataset gives it, indented, and nothing the prompt already shows
    assert r.privileged.startswith("    for idx, elem in enumerate(numbers):\n")
    assert r.privileged.rstrip().endswith("return False") and r.privileged.endswith("\n")
    assert not any("def " + x.meta["entry_point"] + "(" in x.privileged.split("\n")[0] for x in records)
    assert not any('"""' in x.privileged.split("\n")[0] for x in records)
    assert not any("def check(candidate)" in x.privileged or "METADATA" in x.privileged for x in records)


def test_medical_default_has_every_table_and_neutral_prompts():
    records = load_source("medical")
    tables = {r.meta["table"] for r in records}
    assert tables == {"thyroid", "cardiovascular", "diabetes", "hypertension"}
    assert len(records) == 400
    for r in records:
        pid = r.meta["patient_id"]
        assert re.fullmatch(r"(TH|CV|DB|HT)-\d{5}", pid)
        # The only record-specific thing the student sees is the identifier.
        assert re.sub(r"\d", "", r.prompt.replace(pid, "")) == r.prompt.replace(pid, "")
        assert r.privileged.startswith(f"Clinical note for patient {pid}: ")
        note = r.privileged.split(": ", 1)[1].split("\n")[0]
        assert note not in r.prompt
        assert r.privileged.endswith(f"Conclusion: {r.answer}.")


def test_medical_privileged_renders_the_patients_own_row():
    records = load_source("medical", tables=["diabetes"], per_table=None)
    assert len(records) == 752  # rows with glucose and BMI recorded
    first = next(r for r in records if r.meta["patient_id"] == "DB-00001")
    # diabetes.csv row 1: 6,148,72,35,0,33.6,0.627,50,1 (insulin 0 = not recorded)
    assert first.answer == "diabetes"
    assert "50-year-old woman, 6 pregnancies" in first.privileged
    assert "glucose 148 mg/dL" in first.privileged and "BMI 33.6" in first.privileged
    assert "insulin" not in first.privileged
    assert "glucose 148 mg/dL is at or above the 140 mg/dL" in first.privileged


def test_medical_thyroid_row_and_label_code():
    records = load_source("medical", tables=["thyroid"], per_table=300, seed=3)
    assert all(r.meta["table"] == "thyroid" for r in records) and len(records) == 300
    some = records[0]
    assert "TSH" in some.privileged and "referred for thyroid testing" in some.prompt


def test_medical_pool_is_a_seeded_random_sample():
    a = load_source("medical", tables=["hypertension"], per_table=20, seed=1)
    b = load_source("medical", tables=["hypertension"], per_table=20, seed=1)
    c = load_source("medical", tables=["hypertension"], per_table=20, seed=2)
    assert [r.record_id for r in a] == [r.record_id for r in b]
    assert {r.record_id for r in a} != {r.record_id for r in c}
    rows = [r.meta["row"] for r in a]
    assert rows == sorted(rows) and rows != list(range(20))  # table order, not the first rows


def test_medical_record_ids_do_not_depend_on_the_seed():
    a = {r.meta["patient_id"]: r.record_id for r in load_source("medical", tables=["diabetes"], seed=0)}
    b = {r.meta["patient_id"]: r.record_id for r in load_source("medical", tables=["diabetes"], seed=5)}
    shared = set(a) & set(b)
    assert shared and all(a[p] == b[p] for p in shared)


def test_unknown_medical_table_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown medical tables \\['kidney'\\]"):
        load_source("medical", tables=["kidney"])


def test_limit_is_a_seeded_nested_subset_in_source_order():
    full = [r.record_id for r in load_source("humaneval")]
    ten = [r.record_id for r in load_source("humaneval", limit=10, seed=7)]
    assert ten == [r.record_id for r in load_source("humaneval", limit=10, seed=7)]
    assert ten != full[:10] and len(ten) == 10
    assert ten == [i for i in full if i in set(ten)]
    five = [r.record_id for r in load_source("humaneval", limit=5, seed=7)]
    assert set(five) <= set(ten)
    assert set(ten) != {r.record_id for r in load_source("humaneval", limit=10, seed=8)}


def test_medical_privileged_fits_the_token_budget(tokenizer):
    records = load_source("medical")
    lengths = [len(tokenizer(r.privileged, add_special_tokens=False)["input_ids"]) for r in records]
    assert max(lengths) < 250
    load_source("medical", tokenizer=tokenizer, max_tokens=250)  # the budget check passes
