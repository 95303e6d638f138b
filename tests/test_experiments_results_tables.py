"""experiments/results_tables.py's prospective-test table: built from what results/ holds, each test seed alone, then
the seeds pooled, with the comparator chosen on the development run of the chosen setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import experiment_script

KEPT = Path(__file__).resolve().parents[1] / "results"
DEV = "protocol-dev-code-plan-seed8"


@pytest.fixture(scope="module")
def tables():
    return experiment_script("results_tables")


@pytest.fixture(scope="module")
def pool():
    return experiment_script("pool_runs")


def _results(tmp_path: Path, links: dict[str, str], choices: dict | None) -> Path:
    """A results/ folder: each name links to a kept run; protocol_choices.json when `choices`."""
    root = tmp_path / "results"
    root.mkdir()
    for name, kept in links.items():
        (root / name).symlink_to(KEPT / kept, target_is_directory=True)
    if choices is not None:
        (root / "protocol_choices.json").write_text(json.dumps(choices))
    return root


def test_without_a_finished_test_seed_the_table_says_so(tables, pool, tmp_path):
    empty = _results(tmp_path, {DEV: DEV}, {"code": {"chosen": "plan"}})
    assert tables.protocol_test_rows(empty) == []
    body = tables.table(pool, "protocol-test", empty)
    assert body.splitlines()[2] == tables.NOTHING_YET and len(body.splitlines()) == 3


def test_one_seed_is_read_with_the_development_runs_comparator(tables, pool, tmp_path):
    # a copying-teacher run stands in for test seed 6 (on its own labels another baseline is best); a seed 7 with no
    # scores yet is not a row
    stand_in = "regime_code_prepared_e8_seed2"
    results = _results(tmp_path, {DEV: DEV, "protocol-test-code-plan-seed6": stand_in}, {"code": {"chosen": "plan"}})
    (results / "protocol-test-code-plan-seed7").mkdir()
    assert tables.protocol_test_rows(results) == [("code, plan, test seed 6", ["protocol-test-code-plan-seed6"],
                                                   [DEV])]
    line = tables.table(pool, "protocol-test", results).splitlines()[2]
    # what pool_runs.py RUN --dev DEV reads: the comparator chosen on the development run
    run, dev = results / "protocol-test-code-plan-seed6", results / DEV
    n_boot, seed = pool.bootstrap_settings(run)
    chosen = pool.dev_choices(pool.pooled_scores([dev]), n_boot=n_boot, seed=seed)
    h = pool.pooled_tables(pool.pooled_scores([run]), n_boot=n_boot, seed=seed, chosen=chosen)["headline"]
    base = h.set_index("method").loc["best OUT-only baseline"]
    assert base["chosen_on"] == "development run" and base["attack"] == "fresh_gap_max"
    own = pool.pooled_tables(pool.pooled_scores([run]), n_boot=0, seed=seed)["headline"]
    assert own.set_index("method").loc["best OUT-only baseline", "attack"] != "fresh_gap_max"
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == "code, plan, test seed 6" and cells[3].startswith("fresh_gap_max ")
    assert cells[4] == base["Δ Leaky − this [95% CI]"]


def test_two_seeds_add_the_pooled_decision_and_the_old_comparator_beside_it(tables, tmp_path):
    old = tables.OLD_DEV["code"][1]
    results = _results(tmp_path, {DEV: DEV, "protocol-test-code-plan-seed6": DEV, "protocol-test-code-plan-seed7": DEV,
                                  **{r: r for r in old}}, {"code": {"chosen": "plan"}})
    rows = tables.protocol_test_rows(results)
    seeds = ["protocol-test-code-plan-seed6", "protocol-test-code-plan-seed7"]
    assert [r[0] for r in rows] == ["code, plan, test seed 6", "code, plan, test seed 7",
                                    "**code, plan, test seeds 6, 7 pooled: the decision**",
                                    "code, plan, test seeds 6, 7 pooled, comparator from the copying teacher's "
                                    "seeds 1, 2"]
    assert rows[2][1:] == (seeds, [DEV]) and rows[3][1:] == (seeds, old)


def test_a_domain_without_a_recorded_choice_has_no_rows(tables, tmp_path):
    results = _results(tmp_path, {"protocol-test-code-plan-seed6": DEV}, None)
    assert tables.protocol_test_rows(results) == []
