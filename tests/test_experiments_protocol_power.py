"""experiments/protocol_power.py: how often a test of K targets shows a development run's lead, by the decision
rule's paired two-level bootstrap CI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import experiment_script
from leakaudit.per_target import TargetScores


@pytest.fixture(scope="module")
def power():
    return experiment_script("protocol_power")


def _target(name: str, y, primary, versus) -> TargetScores:
    return TargetScores(("math", name), np.array(y, dtype=bool), np.array([primary, versus], dtype=np.float64))


def test_per_target_differences_by_hand(power):
    # A: primary ranks both members first (AUROC 1), versus ranks them last (0): +1.
    # B: members score 1 and 3, non-members 2 and 4: one pair of four won (0.25); versus is all ties (0.5): -0.25.
    targets = [_target("A", [1, 1, 0, 0], [4, 3, 2, 1], [1, 2, 3, 4]),
               _target("B", [1, 1, 0, 0], [1, 3, 2, 4], [2, 2, 2, 2])]
    assert power.per_target_differences(targets).tolist() == [1.0, -0.25]


def _targets(rng, n: int, lead: float) -> list[TargetScores]:
    """n targets of 24 + 24 candidates: versus is noise, primary adds `lead` to members' noise."""
    y = np.r_[np.ones(24), np.zeros(24)].astype(bool)
    return [_target(f"t{i}", y, rng.normal(size=48) + lead * y, rng.normal(size=48)) for i in range(n)]


def test_a_large_lead_is_always_shown_and_none_or_a_deficit_never(power):
    rng = np.random.default_rng(0)
    strong = _targets(rng, 8, lead=3.0)
    assert power.simulated_power(strong, k=16, sims=20, n_boot=200, seed=0) == 1.0
    same = [_target(t.key[1], t.y, t.scores[1], t.scores[1]) for t in strong]  # primary == versus: Δ is 0 exactly
    assert power.simulated_power(same, k=16, sims=20, n_boot=200, seed=0) == 0.0
    reversed_ = [_target(t.key[1], t.y, t.scores[1], t.scores[0]) for t in strong]
    assert power.simulated_power(reversed_, k=16, sims=20, n_boot=200, seed=0) == 0.0


def test_more_targets_show_a_modest_lead_more_often(power):
    targets = _targets(np.random.default_rng(1), 8, lead=0.4)
    few = power.simulated_power(targets, k=4, sims=60, n_boot=200, seed=0)
    many = power.simulated_power(targets, k=32, sims=60, n_boot=200, seed=0)
    assert few < many


def test_an_unknown_attack_exits_2_and_writes_nothing(power, tmp_path, monkeypatch, capsys):
    run = tmp_path / "dev"
    run.mkdir()
    rows = [(f"r{i}", "math-s0", "math", a, float(i), i % 2 == 0, False) for i in range(8) for a in ("leaky@offline",
                                                                                                   "loss")]
    pd.DataFrame(rows, columns=["record_id", "target", "domain", "attack", "score", "is_member", "null_check"]
                 ).to_parquet(run / "scores.parquet")
    out = tmp_path / "power.json"
    monkeypatch.setattr("sys.argv", ["protocol_power.py", str(run), "--versus", "zlib", "--json", str(out)])
    with pytest.raises(SystemExit) as e:
        power.main()
    assert e.value.code == 2 and not out.exists()
    assert "zlib" in capsys.readouterr().err
    monkeypatch.setattr("sys.argv", ["protocol_power.py", str(run), "--versus", "loss", "--targets", "2", "--sims",
                                     "5", "--n-boot", "50", "--json", str(out)])
    power.main()
    written = json.loads(out.read_text())
    assert written["dev_targets"] == 1 and written["per_target_difference"] == [0.0]


def test_the_low_fpr_half_by_hand(power):
    # pooled non-members: primary 0, 0.5, 0.2, 0.1 (max 0.5); members 5, 1, 2, -1: three above -> TPR 0.75.
    # versus: non-members 1, 1, 0, 0 (max 1); members 0, 0, 3, 0: one above -> 0.25. With 4 negatives, FPR <= 1%
    # means no negative above the threshold.
    a = _target("A", [1, 1, 0, 0], [5, 1, 0, 0.5], [0, 0, 1, 1])
    b = _target("B", [1, 1, 0, 0], [2, -1, 0.2, 0.1], [3, 0, 0, 0])
    assert power.low_fpr_lead([a, b])
    swapped = [_target(t.key[1], t.y, t.scores[1], t.scores[0]) for t in (a, b)]
    assert not power.low_fpr_lead(swapped)
    same = [_target(t.key[1], t.y, t.scores[0], t.scores[0]) for t in (a, b)]
    assert not power.low_fpr_lead(same)  # a tie is not a lead


def test_simulated_tests_read_both_halves(power):
    strong = _targets(np.random.default_rng(0), 8, lead=3.0)
    assert power.simulated_readings(strong, k=16, sims=10, n_boot=100, seed=0) == {"auroc": 1.0, "low_fpr": 1.0,
                                                                                    "both": 1.0}
    same = [_target(t.key[1], t.y, t.scores[1], t.scores[1]) for t in strong]
    assert power.simulated_readings(same, k=16, sims=10, n_boot=100, seed=0) == {"auroc": 0.0, "low_fpr": 0.0,
                                                                                  "both": 0.0}


def test_the_low_fpr_half_reads_a_stored_run_as_the_decision_rule_does(power, tmp_path, monkeypatch):
    """On code's development run, Leaky's TPR at 1% FPR on the normalised pool is below fresh_gap_max's (0.062 vs
    0.120 in docs/results.md): the script's reading agrees with pool_runs' goal_reading."""
    from pathlib import Path

    pool = experiment_script("pool_runs")
    run = Path(__file__).resolve().parents[1] / "results" / "protocol-dev-code-plan-seed8"
    goal = pool.goal_reading(pool.pooled_tables(pool.pooled_scores([run]), n_boot=0, seed=0)["headline"])
    assert goal["baseline_attack"] == "fresh_gap_max" and not goal["tpr_lead"]
    out = tmp_path / "power.json"
    monkeypatch.setattr("sys.argv", ["protocol_power.py", str(run), "--versus", "fresh_gap_max", "--targets", "8",
                                     "--sims", "3", "--n-boot", "20", "--json", str(out)])
    power.main()
    assert json.loads(out.read_text())["dev_low_fpr_lead"] is False
    monkeypatch.setattr("sys.argv", ["protocol_power.py", str(run), "--primary", "fresh_gap_max", "--versus",
                                     "leaky@offline", "--targets", "8", "--sims", "3", "--n-boot", "20", "--json",
                                     str(out)])
    power.main()
    assert json.loads(out.read_text())["dev_low_fpr_lead"] is True
