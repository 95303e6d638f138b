"""Hub sources read from tiny hand-written local files in each hub format (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from leakaudit.data.hub_math import last_boxed
from leakaudit.data.sources import load_source
from leakaudit.errors import InputError

DATA = Path(__file__).parent / "data"


@pytest.fixture
def hub(tmp_path):
    """load_source for a hub source pointed at tests/data/hub_<name>.jsonl, caching under tmp_path."""

    def load(name: str, **options):
        options.setdefault("data_files", DATA / f"hub_{name}.jsonl")
        return load_source(name, cache_dir=tmp_path / "hf", **options)

    return load


def test_gsm8k_splits_final_answer_and_strips_calculator_annotations(hub):
    records = hub("gsm8k")
    assert len(records) == 3
    r = records[0]
    assert (r.domain, r.source, r.answer) == ("math", "gsm8k", "26")
    assert r.prompt.endswith("She gives 10 pencils away. How many pencils does she have left?")
    assert r.privileged == ("Mia has 3 * 12 = 36 pencils.\nAfter giving 10 away she has 36 - 10 = 26 pencils.\n"
                            "Final answer: 26")
    assert records[2].answer == "3600"  # thousands separator removed


def test_math_answer_is_the_last_boxed_with_nested_braces(hub):
    records = hub("math")
    assert [r.answer for r in records] == ["\\frac{5}{6}", "4", "6"]
    r = records[0]
    assert r.prompt.endswith("What is $\\frac{1}{2} + \\frac{1}{3}$?")
    assert r.privileged.startswith("A common denominator is 6") and r.meta == {"level": "Level 1",
                                                                                "type": "Prealgebra"}
    assert last_boxed("no box here") is None and last_boxed("\\boxed{a{b}c") is None


def test_medqa_prompt_lists_options_and_privileged_names_the_answer(hub):
    r = hub("medqa")[1]
    assert (r.domain, r.source, r.answer, r.meta) == ("medical", "medqa", "C", {"meta_info": "step2&3"})
    assert "hypercalcaemia" in r.prompt
    assert "Options:\nA. Small cell carcinoma\nB. Adenocarcinoma\nC. Squamous cell carcinoma\nD. Carcinoid" in r.prompt
    assert r.privileged == "The correct answer is C. Squamous cell carcinoma."


def test_medqa_reads_a_parquet_copy(tmp_path, hub):
    rows = [json.loads(line) for line in (DATA / "hub_medqa.jsonl").read_text().splitlines()]
    path = tmp_path / "medqa.parquet"
    pd.DataFrame(rows).to_parquet(path)
    from_parquet = hub("medqa", path=path)
    assert [r.record_id for r in from_parquet] == [r.record_id for r in hub("medqa")]


def test_medmcqa_uses_cop_and_appends_the_explanation_when_present(hub):
    records = hub("medmcqa")
    wrist, absence, measles = records
    assert wrist.answer == "C" and wrist.privileged.startswith("The correct answer is C. Radial nerve.\nExplanation: ")
    assert "A. Median nerve\nB. Ulnar nerve\nC. Radial nerve\nD. Axillary nerve" in wrist.prompt
    assert absence.privileged == "The correct answer is A. Ethosuximide."  # exp is null
    assert absence.meta == {"id": "q-002", "subject_name": "Pharmacology"}
    assert measles.answer == "B" and measles.source == "medmcqa"


def test_pubmedqa_privileged_holds_the_abstract_and_conclusion(hub):
    records = hub("pubmedqa")
    assert [r.answer for r in records] == ["yes", "no", "maybe"]
    r = records[0]
    assert r.prompt.endswith("Does daily walking lower resting blood pressure in older adults?")
    assert r.privileged == ("Abstract:\nBACKGROUND: Hypertension is common in adults over 65.\n"
                            "METHODS: We randomised 120 adults to daily walking or usual care for 12 weeks.\n"
                            "RESULTS: Systolic pressure fell by 6 mmHg more in the walking group.\n"
                            "Conclusion: Daily walking lowered resting systolic blood pressure in older adults.\n"
                            "Answer: yes")
    assert r.meta == {"pubid": 1001}
    assert "walking group" not in r.prompt


def test_mbpp_prompt_shows_tests_and_privileged_is_the_code(hub):
    r = hub("mbpp")[0]
    assert (r.domain, r.source, r.answer, r.meta) == ("code", "mbpp", None, {"task_id": 901})
    assert "sum of the squares" in r.prompt
    assert "assert sum_squares([1, 2, 3]) == 14\nassert sum_squares([]) == 0" in r.prompt
    assert r.privileged == "def sum_squares(xs):\n    return sum(x * x for x in xs)\n"


def test_hub_row_with_a_missing_field_names_the_row_and_field(tmp_path, hub):
    bad = tmp_path / "gsm8k_bad.jsonl"
    bad.write_text('{"question": "q1", "answer": "a #### 1"}\n{"question": "q2"}\n')
    with pytest.raises(InputError, match=r"gsm8k_bad.jsonl, line 2, field 'answer': is missing"):
        hub("gsm8k", data_files=bad)


def test_hub_row_with_a_bad_value_names_the_field(tmp_path, hub):
    bad = tmp_path / "medmcqa_test.jsonl"
    row = json.loads((DATA / "hub_medmcqa.jsonl").read_text().splitlines()[0]) | {"cop": -1}
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match=r"line 1, field 'cop': must be 0-3"):
        hub("medmcqa", data_files=bad)
    no_final = tmp_path / "gsm.jsonl"
    no_final.write_text('{"question": "q", "answer": "just reasoning"}\n')
    with pytest.raises(InputError, match=r"field 'answer': has no '#### <final answer>' line"):
        hub("gsm8k", data_files=no_final)


def test_missing_local_copy_is_an_input_error(tmp_path, hub):
    with pytest.raises(InputError, match="nowhere.jsonl: no such file"):
        hub("mbpp", data_files=tmp_path / "nowhere.jsonl")


def test_empty_hub_text_field_is_named(tmp_path, hub):
    bad = tmp_path / "mbpp_bad.jsonl"
    bad.write_text('{"task_id": 1, "text": "   ", "code": "x = 1", "test_list": ["assert x"]}\n')
    with pytest.raises(InputError, match=r"mbpp_bad.jsonl, line 1, field 'text': is empty"):
        hub("mbpp", data_files=bad)


# ---------------------------------------------------------------- hub ids without a network
NO_SUCH_DATASET = "leakaudit-tests/no-such-dataset-0d81e5c"


@pytest.mark.parametrize("source", ["gsm8k", "math", "medqa", "mbpp"])
def test_unknown_hub_dataset_fails_at_once_when_the_hub_is_unreachable(tmp_path, monkeypatch, source):
    """Without a network datasets.load_dataset retries for tens of seconds; the loaders fail at once instead."""
    import time

    import huggingface_hub.constants

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a closed port: every connection is refused
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    start = time.monotonic()
    with pytest.raises(InputError, match="could not be reached") as info:
        load_source(source, hub_id=NO_SUCH_DATASET, cache_dir=tmp_path / "hf")
    assert time.monotonic() - start < 10
    assert NO_SUCH_DATASET in str(info.value) and "data_files=" in str(info.value)


def test_unknown_hub_dataset_offline_exits_2_at_once(tmp_path):
    """HF_HUB_OFFLINE=1 (set before the process starts, as users do): one line, exit 2, within seconds."""
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "leakaudit.cli", "records", "--source", "gsm8k", "-o",
                          f"hub_id={NO_SUCH_DATASET}"], capture_output=True, text=True, env=env, timeout=120)
    assert time.monotonic() - start < 30  # interpreter start and imports included
    assert res.returncode == 2, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
    assert lines[-1].startswith("error: ") and NO_SUCH_DATASET in lines[-1] and "Traceback" not in res.stderr
