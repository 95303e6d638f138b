"""experiments/pool_runs.py: several runs' real targets pooled into one table, as the report computes one run's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from conftest import experiment_script

KEPT = Path(__file__).resolve().parents[1] / "results"  # the reported runs' study.yaml, scores.parquet, metrics.json


@pytest.fixture(scope="module")
def pool():
    return experiment_script("pool_runs")


def _run(root: Path, name: str, scores: list[tuple]) -> Path:
    d = root / name
    d.mkdir()
    pd.DataFrame(scores, columns=["record_id", "target", "domain", "attack", "score", "is_member", "null_check"]
                 ).to_parquet(d / "scores.parquet")
    return d


def test_targets_of_two_runs_stay_apart_and_a_shared_record_is_one_cluster(pool, tmp_path):
    rng = np.random.default_rng(0)
    rows_a = [(f"r{i}", "math-s0", "math", a, float(rng.normal()), i % 2 == 0, False)
              for i in range(6) for a in ("leaky", "loss")]
    rows_b = [(f"r{i}", "math-s0", "math", a, float(rng.normal()), i % 2 == 1, False)
              for i in range(3, 9) for a in ("leaky", "loss")]
    null = [("r0", "math-null", "math", "leaky", 9.0, True, True)]  # a null row is never pooled
    a, b = _run(tmp_path, "A", rows_a + null), _run(tmp_path, "B", rows_b)
    scores = pool.pooled_scores([a, b])
    assert set(scores["target"]) == {"A/math-s0", "B/math-s0"} and not scores["null_check"].any()
    t = pool.pooled_tables(scores, n_boot=50, seed=0)
    leaky = t["attacks"].set_index("label").loc["leaky"]
    rows = pd.DataFrame(rows_a + rows_b, columns=["record_id", "target", "domain", "attack", "score", "is_member",
                                                  "null_check"])
    rows = rows[rows.attack == "leaky"]
    per_target = [roc_auc_score(g.is_member, g.score) for _, g in (rows.assign(run=[0] * 6 + [1] * 6)).groupby("run")]
    assert leaky["n_targets"] == 2 and leaky["auroc"] == pytest.approx(np.mean(per_target))
    m = t["metrics"]
    pooled = m[(m["level"] == "all") & (m["label"] == "leaky")].iloc[0]
    assert (pooled["n_pos"], pooled["n_neg"]) == (6, 6)
    # records r3..r5 are candidates of both runs: 9 clusters for 12 rows (the cluster bootstrap, not the row one)
    assert scores[scores.attack == "leaky"]["record_id"].nunique() == 9


def test_one_kept_run_reproduces_its_report(pool):
    run = KEPT / "regime_math_prepared_e8_offline8_seed2"
    n_boot, seed = pool.bootstrap_settings(run)
    t = pool.pooled_tables(pool.pooled_scores([run]), n_boot=n_boot, seed=seed)
    report = json.loads((run / "metrics.json").read_text())
    want = {(r["domain"], r["method"]): r for r in report["headline"]}
    assert len(want) == len(t["headline"]) > 0
    for r in t["headline"].to_dict("records"):
        w = want[(r["domain"], r["method"])]
        assert r["attack"] == w["attack"]
        nan = float("nan")
        assert (r["auroc"], r["delta"]) == pytest.approx((w["auroc"], nan if w["delta"] is None else w["delta"]),
                                                         nan_ok=True)
        if w["auroc_lo"] is not None:
            assert (r["auroc_lo"], r["auroc_hi"]) == pytest.approx((w["auroc_lo"], w["auroc_hi"]))
    goal = pool.goal_reading(t["headline"])
    best = want[("math", "best OUT-only baseline")]
    assert goal["baseline_attack"] == best["attack"] and goal["delta_lo"] == pytest.approx(best["delta_lo"])
    assert goal["auroc_lead"] == (best["delta_lo"] > 0) and goal["reached"] is False  # 96 negatives: no TPR@1%


def test_baselines_chosen_on_a_development_run_are_read_as_chosen(pool):
    dev = KEPT / "regime_math_prepared_e8_offline8_seed2"
    test = KEPT / "regime_math_prepared_e8_offline8_seed3"
    chosen = pool.dev_choices(pool.pooled_scores([dev]), n_boot=0, seed=0)
    assert chosen["best OUT-only baseline"] == "fresh_gap_mean@offline" and chosen["best online attack (IN+OUT)"] == "rmia"
    h = pool.pooled_tables(pool.pooled_scores([test]), n_boot=20, seed=0, chosen=chosen)["headline"].set_index("method")
    assert h.loc["best OUT-only baseline", "attack"] == "fresh_gap_mean@offline"
    assert h.loc["best OUT-only baseline", "chosen_on"] == "development run"
    assert h.loc["Leaky", "chosen_on"] == "these labels"


def test_null_targets_are_pooled_apart_and_one_run_reproduces_its_null_check(pool, tmp_path):
    run = KEPT / "regime_math_prepared_e8_offline8_seed3"
    n_boot, seed = pool.bootstrap_settings(run)
    got = pool.pooled_null_check(pool.pooled_scores([run], null_check=True), n_boot=n_boot, seed=seed).set_index("label")
    want = {r["label"]: r for r in json.loads((run / "metrics.json").read_text())["null_check"]}
    assert set(got.index) == set(want)
    for label, w in want.items():
        assert (got.loc[label, "auroc"], got.loc[label, "auroc_lo"], got.loc[label, "auroc_hi"]) == pytest.approx(
            (w["auroc"], w["auroc_lo"], w["auroc_hi"]))
    assert got.loc["leaky@offline", "auroc"] == pytest.approx(0.674, abs=5e-4)
    # two runs: null rows only, each run's null target kept apart, pooled AUROC = AUROC of the rows together
    null_a = [(f"r{i}", "math-null", "math", "leaky", float(i), i < 3, True) for i in range(6)]
    null_b = [(f"r{i}", "math-null", "math", "leaky", float(i), i >= 3, True) for i in range(6)]
    real = [("r0", "math-s0", "math", "leaky", 0.0, True, False), ("r1", "math-s0", "math", "leaky", 1.0, False, False)]
    a, b = _run(tmp_path, "A", null_a + real), _run(tmp_path, "B", null_b)
    rows = pool.pooled_scores([a, b], null_check=True)
    assert set(rows["target"]) == {"A/math-null", "B/math-null"} and rows["null_check"].all()
    t = pool.pooled_null_check(rows, n_boot=50, seed=0).set_index("label")
    # A ranks members last (AUROC 0), B first (1); pooled over 12 rows they cancel exactly: 0.5
    assert t.loc["leaky", "n_targets"] == 2 and t.loc["leaky", "auroc"] == pytest.approx(0.5)
    assert (t.loc["leaky", "n_pos"], t.loc["leaky", "n_neg"]) == (6, 6)
    assert pool.pooled_null_check(pool.pooled_scores([_run(tmp_path, "C", real)], null_check=True), n_boot=50,
                                 seed=0).empty


def test_runs_that_cannot_be_pooled_are_refused_by_name(pool, tmp_path):
    rows = [(f"r{i}", "math-s0", "math", "leaky", float(i), i % 2 == 0, False) for i in range(4)]
    # two seeds kept under the same folder name: before, both runs' math-s0 became one target 'run/math-s0'
    (tmp_path / "seed2").mkdir()
    (tmp_path / "seed3").mkdir()
    a, b = _run(tmp_path / "seed2", "run", rows), _run(tmp_path / "seed3", "run", rows)
    with pytest.raises(pool.InputError, match="share this folder name") as e:
        pool.labelled_rows([a, b])
    assert e.value.path == str(a)
    # one label run with another slope in one run: before, it was pooled as one attack (or split into two labels)
    c, d = _run(tmp_path, "C", rows), _run(tmp_path, "D", rows)
    for run, slope in ((c, 0.1), (d, 0.2)):
        df = pd.read_parquet(run / "scores.parquet").assign(params=json.dumps({"slope": slope}))
        df.to_parquet(run / "scores.parquet")
    with pytest.raises(pool.InputError, match="'leaky' was run with other parameters"):
        pool.labelled_rows([c, d])
    # and runs read with other bootstrap settings are refused before any table is computed
    for run, n_boot in ((c, 1000), (d, 200)):
        (run / "metrics.json").write_text(json.dumps({"bootstrap": {"n_boot": n_boot}, "seeds": {"bootstrap": 0}}))
    with pytest.raises(pool.InputError, match="differs from"):
        pool.common_bootstrap_settings([c, d])
    assert pool.common_bootstrap_settings([c, c]) == (1000, 0)


def _pool_of(primary: np.ndarray, versus: np.ndarray, y: np.ndarray, n_targets: int) -> pd.DataFrame:
    """Scores of two attacks on `n_targets` targets that share one candidate layout (labels y)."""
    rows = [("math", f"t{k}", f"r{k}-{i}", label, float(v), bool(y[i])) for k in range(n_targets)
            for label, values in (("leaky@offline", primary), ("fresh_gap_max", versus)) for i, v in enumerate(values)]
    return pd.DataFrame(rows, columns=["domain", "target", "record_id", "label", "score", "is_member"])


def test_the_low_fpr_difference_and_its_ci(pool):
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(30), np.zeros(30)].astype(bool)  # 4 targets x 30 non-members = 120: 1% FPR is resolvable
    noise = rng.normal(size=60)
    same = pool.low_fpr_difference(_pool_of(noise, noise, y, 4), "leaky@offline", "fresh_gap_max", n_boot=50, seed=0)
    assert same == {"delta": 0.0, "lo": 0.0, "hi": 0.0}
    # primary puts every member above every non-member (TPR 1 at any FPR); versus is noise
    planted = np.where(y, 10.0, 0.0) + rng.normal(size=60) * 0.1
    d = pool.low_fpr_difference(_pool_of(planted, noise, y, 4), "leaky@offline", "fresh_gap_max", n_boot=50, seed=0)
    assert d["lo"] > 0 and d["lo"] <= d["delta"] <= d["hi"] <= 1.0
    few = pool.low_fpr_difference(_pool_of(planted, noise, y, 3), "leaky@offline", "fresh_gap_max", n_boot=50, seed=0)
    assert np.isnan(few["delta"])  # 90 non-members: 1% FPR cannot be resolved


def test_the_low_fpr_difference_is_the_decision_rules_tpr_gap_on_a_stored_run(pool):
    run = Path(__file__).resolve().parents[1] / "results" / "protocol-dev-code-plan-seed8"
    scores = pool.pooled_scores([run])
    goal = pool.goal_reading(pool.pooled_tables(scores, n_boot=0, seed=0)["headline"])
    d = pool.low_fpr_difference(scores, goal["leaky_attack"], goal["baseline_attack"], n_boot=200, seed=0)
    assert d["delta"] == pytest.approx(goal["leaky_tpr@1%"] - goal["baseline_tpr@1%"])  # 0.062 - 0.120
    assert d["lo"] <= d["delta"] <= d["hi"] and d["lo"] < 0 < d["hi"]  # 192 negatives: the gap is inside the noise
