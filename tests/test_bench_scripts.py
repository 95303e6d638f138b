"""bench/ holds the maintained benchmarks, each writing bench/benchlib.py's one schema; the analysis scripts are in
experiments/, each naming the docs/results.md number it produces. Neither edits sys.path or imports from tests/.

Every benchmark is checked from its source (it takes benchlib's options and writes through benchlib.write_result);
the ones that run in seconds are run for real and their files read back."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conftest import REPO, bench_script
from fake_run import write_fake_run

HELPERS = {"benchlib", "api_server", "pinned_processes"}
"""bench/'s modules that are not benchmarks: the shared helper, the API test server, the pinned-process launcher."""
OWN_OUT_FOLDER = {"gpu_check"}
"""Writes a folder ($OUT: its result file beside a log), so it keeps its own --out (a folder)."""
SCHEMA_KEYS = {"schema", "name", "commit", "machine", "params", "metrics"}


def _scripts(folder: str) -> list[Path]:
    return sorted(p for p in (REPO / folder).glob("*.py") if p.stem not in HELPERS and not p.stem.startswith("_"))


def _benchlib_calls(tree: ast.AST) -> set[str]:
    return {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "benchlib"}


def _own_options(tree: ast.AST) -> set[str]:
    return {a.value for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "add_argument" for a in n.args[:1] if isinstance(a, ast.Constant)}


def _check_schema(doc: dict, name: str) -> None:
    assert set(doc) == SCHEMA_KEYS and doc["name"] == name and doc["schema"] == 1
    assert doc["machine"]["cpu"]["cpu_count"] >= 1 and len(doc["machine"]["loadavg_after"]) == 3
    assert doc["commit"] is None or len(doc["commit"]) == 40


@pytest.mark.parametrize("path", _scripts("bench"), ids=lambda p: p.stem)
def test_every_benchmark_takes_benchlibs_options_and_writes_its_schema(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = _benchlib_calls(tree)
    assert "write_result" in calls, f"{path.name} does not write through benchlib.write_result"
    if path.stem not in OWN_OUT_FOLDER:
        assert "parser" in calls, f"{path.name} does not take benchlib's options"
        assert not {"--out", "--json", "--threads"} & _own_options(tree), f"{path.name} redefines a shared option"


@pytest.mark.parametrize("path", _scripts("bench") + _scripts("experiments"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_script_edits_sys_path_or_imports_from_tests(path):
    text = path.read_text(encoding="utf-8")
    assert "sys.path" not in text
    imported = {n.module for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m.split(".")[0] in ("tests", "conftest", "fake_run")}


@pytest.mark.parametrize("path", _scripts("experiments"), ids=lambda p: p.stem)
def test_every_experiment_names_the_number_it_produces(path):
    first = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))).splitlines()[0]
    assert first.startswith("docs/results.md") or ("Produces" in first and "docs/results.md" in first), first


def test_bench_peak_writes_the_schema_and_reads_its_runs_back(tmp_path):
    peak = bench_script("bench_peak")
    out = tmp_path / "peak.json"
    assert peak.main(["--quick", "--sizes", "64", "--reps", "1", "--threads", "1", "--out", str(out)]) == 0
    assert peak.main(["--sizes", "64", "--reps", "1", "--threads", "1", "--out", str(out)]) == 0  # a second run kept
    doc = json.loads(out.read_text())
    _check_schema(doc, "peak")
    runs = doc["metrics"]["runs"]
    assert [(r["threads"], r["quick"]) for r in runs] == [(1, False), (1, True)]
    assert all(r["best_gflops"]["float32"] > 0 for r in runs) and doc["params"]["sizes"] == [64]


def test_report_time_times_the_command_step_by_step_and_another_checkouts(tmp_path):
    run = write_fake_run(tmp_path / "run")
    other = tmp_path / "other"  # another checkout: its `leakaudit report` is a stub with one step line
    (other / "leakaudit").mkdir(parents=True)
    (other / "leakaudit" / "__init__.py").write_text("")
    (other / "leakaudit" / "cli.py").write_text("import sys\nprint('[report] stub done in 0.5 s', file=sys.stderr)\n")
    out = tmp_path / "report_time.json"
    metrics = bench_script("report_time").main(["--run", str(run), "--n-boot", "20", "--n-perm", "5",
                                                "--compare", str(other), "--out", str(out)])
    doc = json.loads(out.read_text())
    _check_schema(doc, "report_time")
    assert doc["metrics"] == json.loads(json.dumps(metrics)) and doc["params"]["command_args"] == [
        "--n-boot", "20", "--n-perm", "5"]
    this = doc["metrics"]["this"]
    assert this["median_wall_s"] > 0 and this["median_cpu_s"] > 0 and len(this["wall_s"]) == 1
    assert "blind text null: 5 relabellings" in this["median_steps_s"]
    assert doc["metrics"]["compare"]["median_steps_s"] == {"stub": 0.5}
    assert not (run / "report.html").exists()  # it reports on a copy


def test_every_stored_result_in_bench_results_is_in_the_schema():
    for path in sorted((REPO / "bench" / "results").glob("*.json")):
        doc = json.loads(path.read_text())
        assert set(doc) == SCHEMA_KEYS, path.name


def test_the_benchmarks_list_in_the_docs_names_only_scripts_that_exist():
    text = (REPO / "docs" / "performance.md").read_text(encoding="utf-8")
    named = {p for p in text.split() if p.startswith(("bench/", "experiments/")) and p.endswith(".py")}
    assert named and all((REPO / p).is_file() for p in named), named
