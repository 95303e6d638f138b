"""experiments/trajectory_curve.py: cutting every record's fresh signals to its first k trajectories."""

from __future__ import annotations

import numpy as np
import pytest

from attacks import run_attack
from attacks.base import AttackInputs
from attacks.leaky import LeakyParams
from conftest import experiment_script

A = np.asarray


def _inputs() -> AttackInputs:
    # record a: three trajectories with gaps (target − max ref) +1, −1, +3; record b: one trajectory, gap −2.
    return AttackInputs(
        record_ids=["a", "b"],
        fresh_target=[[A([-1.0]), A([-2.0]), A([0.0])], [A([-3.0])]],
        fresh_refs=[[A([[-2.0], [-3.0]]), A([[-1.0], [-4.0]]), A([[-3.0], [-5.0]])], [A([[-1.0], [-2.0]])]],
    )


def test_first_k_keeps_the_first_trajectories_of_each_record():
    first_k = experiment_script("trajectory_curve").first_k
    x = first_k(_inputs(), 2)
    assert [len(t) for t in x.fresh_target] == [2, 1] and [len(r) for r in x.fresh_refs] == [2, 1]
    assert x.fresh_base is None and x.record_ids == ["a", "b"]
    # Leaky (slope 0.1) of record a over its first two trajectories: mean(+1, 0.1 · −1) = 0.45; b: 0.1 · −2
    assert run_attack("leaky", x, LeakyParams()) == pytest.approx([0.45, -0.2])
    # all three: mean(+1, −0.1, +3) = 1.3
    full = first_k(_inputs(), 3)
    assert run_attack("leaky", full, LeakyParams()) == pytest.approx([1.3, -0.2])


def test_trajectories_keeps_the_selected_ones_of_each_record():
    x = experiment_script("trajectory_curve").trajectories(_inputs(), slice(1, 3))
    assert [len(t) for t in x.fresh_target] == [2, 0]
    # record a's 2nd and 3rd trajectories: mean(0.1 · −1, +3) = 1.45
    assert run_attack("leaky", x, LeakyParams())[0] == pytest.approx(1.45)


def test_half_agreement_separates_target_offsets_from_agreement_within_targets():
    import pandas as pd

    agree = experiment_script("trajectory_curve").half_agreement
    # two targets 10 apart; within each, the second half reverses the first half's order of its two records
    wide = pd.DataFrame({"domain": "math", "attack": "leaky", "target": ["t0", "t0", "t1", "t1"],
                         "record_id": ["a", "b", "a", "b"], "is_member": [True, False, True, False],
                         "first": [1.0, 0.0, 11.0, 10.0], "second": [0.0, 1.0, 10.0, 11.0]})
    row = agree(wide).iloc[0]
    assert row.pearson_r_within_target == pytest.approx(-1.0)
    # over all rows the offset dominates: deviations from 5.5 are (−4.5, −5.5, 5.5, 4.5) and (−5.5, −4.5, 4.5, 5.5)
    r = (2 * 4.5 * 5.5 + 2 * 5.5 * 4.5) / (2 * 4.5 ** 2 + 2 * 5.5 ** 2)
    assert row.pearson_r == pytest.approx(r) and row.reliability_whole == pytest.approx(2 * r / (1 + r))
    # pooled AUROC by hand, (member, non-member) pairs over both targets: first half (1,0) win, (1,10) loss,
    # (11,0) win, (11,10) win → 3/4; second half (0,1) loss, (0,11) loss, (10,1) win, (10,11) loss → 1/4
    assert (row.auroc_first, row.auroc_second) == (pytest.approx(0.75), pytest.approx(0.25))
