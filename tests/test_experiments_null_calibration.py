"""experiments/null_check_calibration.py: the null check's chance failures counted against the CI's coverage."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from scipy import stats

from conftest import experiment_script


@pytest.fixture(scope="module")
def cal():
    return experiment_script("null_check_calibration")


def test_h0_sd_is_the_mann_whitney_sd(cal):
    # Var(U) = n1 n2 (n1 + n2 + 1) / 12, AUROC = U / (n1 n2): at 12 + 12, sqrt(25 / 1728)
    assert cal.h0_auroc_sd(12, 12) == pytest.approx(math.sqrt(25 / 1728))
    assert cal.h0_auroc_sd(12, 12) == pytest.approx(0.120281, abs=1e-6)


def test_exact_p_of_a_perfect_split(cal):
    # 3 members all above 3 non-members: one arrangement of C(6, 3) = 20 on each side, p = 2 / 20
    assert cal.exact_p([1, 1, 1, 0, 0, 0], [4.0, 5.0, 6.0, 1.0, 2.0, 3.0]) == pytest.approx(0.1)
    # NaN is the lowest score, as in the report: members with no score tie below every non-member
    # (ties: scipy's normal approximation with tie correction, the same as for any tied finite scores)
    tied = stats.mannwhitneyu([-9.0, -9.0, -9.0], [1.0, 2.0, 3.0], alternative="two-sided").pvalue
    assert cal.exact_p([1, 1, 1, 0, 0, 0], [float("nan"), float("nan"), float("nan"), 1.0, 2.0, 3.0]) \
        == pytest.approx(tied)


def test_simulated_rate_is_a_split_fraction(cal):
    c = cal.simulated_exclusion_rate(4, 4, n_sim=20, n_boot=50, seed=3)
    assert c["rate"] == pytest.approx(c["rate_below"] + c["rate_above"])
    assert 0 <= c["rate"] <= 1 and c["n_sim"] == 20
    assert c == cal.simulated_exclusion_rate(4, 4, n_sim=20, n_boot=50, seed=3)  # seeded


def _fake_run(root, name, cells, scores):
    d = root / name
    d.mkdir()
    (d / "metrics.json").write_text(json.dumps({"null_check": cells}))
    pd.DataFrame(scores).to_parquet(d / "scores.parquet")
    return d


def test_cells_are_counted_by_side(cal, tmp_path):
    rows = []
    for rid, member, s in [("a", True, 4.0), ("b", True, 3.0), ("c", False, 2.0), ("d", False, 1.0)]:
        for attack, score in (("leaky", s), ("loss", -s)):
            rows.append({"record_id": rid, "target": "t-null", "domain": "code", "attack": attack, "score": score,
                         "is_member": member, "null_check": True})
    rows.append({"record_id": "a", "target": "t", "domain": "code", "attack": "leaky", "score": 0.0,
                 "is_member": True, "null_check": False})  # a real target's row is not a null cell
    cells = [{"label": "leaky", "family": "reference", "auroc": 1.0, "auroc_lo": 0.6, "auroc_hi": 1.0,
              "n_pos": 2, "n_neg": 2, "n_targets": 1},
             {"label": "loss", "family": "fixed", "auroc": 0.0, "auroc_lo": 0.0, "auroc_hi": 0.4,
              "n_pos": 2, "n_neg": 2, "n_targets": 1}]
    run = _fake_run(tmp_path, "R", cells, rows)
    got = cal.null_cells(run).set_index("label")
    assert got.loc["leaky", "excludes_0.5"] == "above" and got.loc["loss", "excludes_0.5"] == "below"
    # 2 + 2 records perfectly split: exact p = 2 / C(4, 2)
    assert got.loc["leaky", "p_exact"] == pytest.approx(2 / 6)
    out = cal.calibration([run], n_sim=10)
    assert out["cells"]["n"] == 2 and out["cells"]["excluding_0.5"] == 2
    assert (out["cells"]["below"], out["cells"]["above"]) == (1, 1)
    assert out["leaky"]["n"] == 1 and out["leaky"]["excluding_0.5"] == 1
