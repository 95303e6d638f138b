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
    old = tables.protocol_runs.STORED_DEV_RUNS["code"][1]
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


def test_medical_at_3_passes_reads_its_comparator_on_its_8_pass_development_run(tables, tmp_path):
    # medical's rule runs only 8 passes on development seed 8; a fall-back to 3 passes has no 3-pass seed-8 run, so
    # its test seeds are read against the 8-pass one (amendment 4: "medical: its seed 8 run")
    runs = tables.protocol_runs
    dev = runs.run_name("medical", "passes8", runs.DEV_SEED)
    assert runs.comparator_dev_runs("medical", "passes3") == [dev] == runs.comparator_dev_runs("medical", "passes8")
    results = _results(tmp_path, {dev: DEV, "protocol-test-medical-passes3-seed6": DEV},
                       {"medical": {"chosen": "passes3"}})
    assert tables.protocol_test_rows(results) == [("medical, passes3, test seed 6",
                                                   ["protocol-test-medical-passes3-seed6"], [dev])]
    # code's fall-back, the copying teacher, never ran on seed 8: its stored seeds 1, 2 choose
    assert runs.comparator_dev_runs("code", "prepared") == runs.STORED_DEV_RUNS["code"][1]
    assert runs.comparator_dev_runs("math", "prepared128") == ["protocol-dev-math-prepared128-seed8"]


@pytest.mark.parametrize("decided, leads, goal", [(0, 0, "open (0 of 3 domains decided, 0 with a lead)"),
                                                   (1, 1, "open (1 of 3 domains decided, 1 with a lead)"),
                                                   (2, 1, "open (2 of 3 domains decided, 1 with a lead)"),
                                                   (2, 2, "reached"), (3, 2, "reached"), (2, 0, "not reached"),
                                                   (3, 1, "not reached")])
def test_the_goal_is_two_leads_in_three_domains_and_is_open_while_two_are_still_possible(tables, decided, leads,
                                                                                         goal):
    assert tables.goal_status(decided, leads) == goal


def test_without_recorded_choices_every_domain_is_pending(tables, pool, tmp_path):
    lines = tables.verdict_lines(pool, _results(tmp_path, {}, None))
    assert [line.split("|")[1].strip() for line in lines[2:5]] == ["code", "medical", "math"]
    assert all(line.rstrip().endswith("| pending |") for line in lines[2:5])
    assert lines[-1] == ("Goal, Leaky leads in at least 2 of the 3 domains: "
                         "**open (0 of 3 domains decided, 0 with a lead)**.")


def _math_stand_ins(tmp_path, test_seeds: tuple[int, int]) -> Path:
    """math's chosen option with stored math runs standing in: seed 1 as development seed 8, `test_seeds` as 6, 7;
    code with its development run and one test seed (the development run standing in)."""
    kept = "regime_math_prepared_e8_offline8_seed{}"
    links = {"protocol-dev-math-prepared128-seed8": kept.format(1), DEV: DEV, "protocol-test-code-plan-seed6": DEV,
             **{f"protocol-test-math-prepared128-seed{s}": kept.format(k) for s, k in zip((6, 7), test_seeds)}}
    return _results(tmp_path, links, {"code": {"chosen": "plan"}, "math": {"chosen": "prepared128"}})


def _reading(pool, results: Path, runs: list[str], dev: list[str]) -> dict:
    """What `pool_runs.py RUNS --dev DEV` reports as its goal, computed here from pool_runs' parts."""
    n_boot, seed = pool.common_bootstrap_settings([results / r for r in runs])
    chosen = pool.dev_choices(pool.pooled_scores([results / r for r in dev]), n_boot=n_boot, seed=seed)
    return pool.goal_reading(pool.pooled_tables(pool.pooled_scores([results / r for r in runs]), n_boot=n_boot,
                                                seed=seed, chosen=chosen)["headline"])


@pytest.fixture
def fewer_resamples(pool, monkeypatch):
    """200 resamples instead of the runs' 1000, for speed: these tests check what the verdict is built from."""
    monkeypatch.setattr(pool, "common_bootstrap_settings", lambda dirs: (200, 0))


def test_a_domain_is_decided_once_both_test_seeds_have_scores(tables, pool, tmp_path, fewer_resamples):
    # math seeds 2, 3 read against seed 1's comparator lead on both halves of the rule; code has one test seed
    results = _math_stand_ins(tmp_path, (2, 3))
    lines = tables.verdict_lines(pool, results)
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:5]}
    math = _reading(pool, results, ["protocol-test-math-prepared128-seed6", "protocol-test-math-prepared128-seed7"],
                    ["protocol-dev-math-prepared128-seed8"])
    assert math["delta_lo"] > 0 and math["leaky_tpr@1%"] > math["baseline_tpr@1%"] and math["reached"]
    delta = f"{math['delta']:+.3f} [{math['delta_lo']:+.3f}, {math['delta_hi']:+.3f}] vs {math['baseline_attack']}"
    tpr = f"{math['leaky_tpr@1%']:.3f} / {math['baseline_tpr@1%']:.3f} ({math['n_neg']}); Δ "
    assert cells["math"][:5] == ["math", "copying teacher, 128 tokens", cells["math"][2], "2 of 2 (seeds 6, 7)", delta]
    assert cells["math"][5].startswith(tpr) and cells["math"][6] == "**leads**"
    assert cells["math"][5].startswith(f"{tpr}{math['leaky_tpr@1%'] - math['baseline_tpr@1%']:+.3f} [")
    code = _reading(pool, results, ["protocol-test-code-plan-seed6"], [DEV])
    assert cells["code"][3] == "1 of 2 (seed 6)" and cells["code"][4].endswith(" (interim)")
    assert cells["code"][4].startswith(f"{code['delta']:+.3f} [") and cells["code"][6] == "pending: 1 of 2 test seeds"
    assert cells["medical"][-1] == "pending"
    assert lines[-1].endswith("**open (1 of 3 domains decided, 1 with a lead)**.")


def test_a_decided_domain_without_a_lead_names_the_half_of_the_rule_that_failed(tables, pool, tmp_path,
                                                                                  fewer_resamples):
    results = _math_stand_ins(tmp_path, (4, 5))
    math = _reading(pool, results, ["protocol-test-math-prepared128-seed6", "protocol-test-math-prepared128-seed7"],
                    ["protocol-dev-math-prepared128-seed8"])
    assert math["delta_lo"] <= 0 and math["leaky_tpr@1%"] > math["baseline_tpr@1%"]  # the AUROC half fails alone
    line = tables.verdict_lines(pool, results)[4]
    assert line.startswith("| math |") and line.endswith("| does not lead: the paired CI reaches 0 |")


def test_test_seeds_without_their_development_run_are_not_read(tables, pool, tmp_path):
    # the comparator cannot be chosen, so no reading is made (and nothing fails)
    results = _results(tmp_path, {"protocol-test-code-plan-seed6": DEV}, {"code": {"chosen": "plan"}})
    line = tables.verdict_lines(pool, results)[2]
    assert line == ("| code | plan teacher (the program as numbered English steps) | not stored | 1 of 2 (seed 6) "
                    "| — | — | pending: the development run that chooses the comparator is not stored |")


def test_the_readme_domain_tables_end_with_the_published_result_and_the_results_page_tables_do_not(tables, pool):
    lines = tables.table(pool, "readme-medical").splitlines()
    assert lines[-1] == tables.PUBLISHED and len(lines) == 2 + len(tables.ROWS["readme-medical"]) + 1
    assert "0.875" in tables.PUBLISHED and "0.826" in tables.PUBLISHED and "0.614" in tables.PUBLISHED
    assert tables.PUBLISHED not in tables.table(pool, "protocol-dev")


def test_the_development_table_lists_each_domains_development_runs_with_scores(tables, tmp_path):
    # code: restated stopped after its teacher (no scores), plan chooses; medical fell back to 3 passes, so its
    # 8-pass run chooses; math tried two options and chose the second
    choices = {"code": {"chosen": "plan", "dev_runs": ["protocol-dev-code-restated-seed8", DEV]},
               "medical": {"chosen": "passes3", "dev_runs": ["dev-medical-prepared-e8-offline8-c48-seed8"]},
               "math": {"chosen": "prepared128", "dev_runs": ["protocol-dev-math-restated48-seed8",
                                                              "protocol-dev-math-prepared128-seed8"]}}
    links = {DEV: DEV, "dev-medical-prepared-e8-offline8-c48-seed8": DEV, "protocol-dev-math-restated48-seed8": DEV,
             "protocol-dev-math-prepared128-seed8": DEV}
    results = _results(tmp_path, links, choices)
    (results / "protocol-dev-code-restated-seed8").mkdir()
    assert tables.protocol_dev_rows(results) == [
        ("code, plan teacher (the program as numbered English steps), development seed 8 (chooses the comparator)",
         [DEV]),
        ("medical, 8 passes, development seed 8 (chooses the comparator)",
         ["dev-medical-prepared-e8-offline8-c48-seed8"]),
        ("math, restated teacher (answer first), 48 tokens, development seed 8",
         ["protocol-dev-math-restated48-seed8"]),
        ("math, copying teacher, 128 tokens, development seed 8 (chooses the comparator)",
         ["protocol-dev-math-prepared128-seed8"])]
    (tmp_path / "none").mkdir()
    assert tables.protocol_dev_rows(_results(tmp_path / "none", {}, None)) == []
