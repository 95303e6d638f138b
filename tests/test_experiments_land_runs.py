"""experiments/land_runs.py: finished protocol runs are copied into results/ with their index rows, unfinished ones
are not, a second landing copies nothing, and bad input writes nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import experiment_script

REPO = Path(__file__).resolve().parents[1]
KEPT = REPO / "results" / "protocol-dev-code-plan-seed8"
L = experiment_script("land_runs")
INDEX = "# Reported runs\n\n| run | domain | design | seed | tables | files |\n|---|---|---|---|---|---|\n" \
        "| `older` | math | by hand | 0 | headline | |\n\nRuns named but not kept: none.\n"


def _out_root(tmp_path: Path) -> Path:
    """An out-root as protocol_runs.py leaves it: code's development run and test seed 6 finished, seed 7 training
    (study.yaml only), code's choice recorded."""
    src = tmp_path / "runs"
    for name in ("protocol-dev-code-plan-seed8", "protocol-test-code-plan-seed6"):
        shutil.copytree(KEPT, src / "results" / name)
    (src / "results" / "protocol-test-code-plan-seed7").mkdir()
    shutil.copy2(KEPT / "study.yaml", src / "results" / "protocol-test-code-plan-seed7" / "study.yaml")
    (src / "protocol_choices.json").write_text(json.dumps({"code": {"chosen": "plan"}}))
    return src


def _results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    (results / "index.md").write_text(INDEX)
    return results


def test_finished_runs_land_with_their_rows_and_a_second_landing_copies_nothing(tmp_path):
    src, results = _out_root(tmp_path), _results(tmp_path)
    assert L.land(src, results) == ["protocol-dev-code-plan-seed8", "protocol-test-code-plan-seed6"]
    assert not (results / "protocol-test-code-plan-seed7").exists()  # still training: no scores.parquet
    for name in ("protocol-dev-code-plan-seed8", "protocol-test-code-plan-seed6"):
        assert sorted(p.name for p in (results / name).iterdir()) == sorted(p.name for p in KEPT.iterdir())
    assert json.loads((results / "protocol_choices.json").read_text()) == {"code": {"chosen": "plan"}}
    lines = (results / "index.md").read_text().splitlines()
    plan = "the protocol's design, plan teacher (the program as numbered English steps)"
    assert lines[5:7] == [
        f"| `protocol-dev-code-plan-seed8` | code | {plan}: development seed, which chooses the comparator of the test "
        "seeds | 8 | protocol-dev, protocol-test, readme-verdict | |",
        f"| `protocol-test-code-plan-seed6` | code | {plan}: test seed | 6 | protocol-test, readme-verdict | |"]
    assert lines[4] == "| `older` | math | by hand | 0 | headline | |" and lines[-1] == "Runs named but not kept: none."
    before = (results / "index.md").read_text()
    assert L.land(src, results) == [] and (results / "index.md").read_text() == before
    (src / "results" / "protocol-test-code-plan-seed6" / "metrics.json").write_text("{}")  # the report rebuilt
    assert L.land(src, results) == ["protocol-test-code-plan-seed6"]
    assert (results / "protocol-test-code-plan-seed6" / "metrics.json").read_text() == "{}"
    assert (results / "index.md").read_text() == before  # a listed run keeps its row


def test_a_development_run_that_does_not_choose_the_comparator_feeds_only_the_development_table():
    choices = {"math": {"chosen": "prepared128"}, "medical": {"chosen": "passes3"}}
    assert L.index_row("protocol-dev-math-restated48-seed8", choices).endswith("| 8 | protocol-dev | |")
    assert L.index_row("protocol-dev-math-prepared128-seed8", choices).endswith(
        "| protocol-dev, protocol-test, readme-verdict | |")
    # medical's fall-back to 3 passes reads its comparator on the 8-pass development run
    medical = L.index_row("dev-medical-prepared-e8-offline8-c48-seed8", choices)
    assert medical.endswith("| 8 | protocol-dev, protocol-test, readme-verdict | |")


@pytest.mark.parametrize("make_bad, says", [
    (lambda src: shutil.rmtree(src / "results"), "no results/ folder"),
    # sorted after the protocol's runs, so a check made while copying would come too late
    (lambda src: shutil.copytree(KEPT, src / "results" / "zz-own-run"), "not a run of the protocol")])
def test_bad_input_exits_2_naming_the_folder_and_writes_nothing(tmp_path, make_bad, says):
    src, results = _out_root(tmp_path), _results(tmp_path)
    make_bad(src)
    proc = subprocess.run([sys.executable, str(REPO / "experiments" / "land_runs.py"), "--from", str(src),
                           "--results", str(results)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and str(src) in proc.stderr
    assert sorted(p.name for p in results.iterdir()) == ["index.md"] and (results / "index.md").read_text() == INDEX
