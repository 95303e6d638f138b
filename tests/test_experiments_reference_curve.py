"""experiments/reference_curve.py: cutting every record's references to its first m IN and first m OUT ones."""

from __future__ import annotations

import numpy as np
import pytest

from attacks import run_attack
from attacks.base import AttackInputs
from attacks.leaky import LeakyParams
from conftest import experiment_script

A = np.asarray


def _inputs() -> AttackInputs:
    # one record, one trajectory of one token: target −1, OUT references −3, −0.5, −2 (so the max over the first
    # one is −3, over the first two −0.5); fixed rows: IN, OUT, IN, OUT, OUT with distinct values to follow them
    return AttackInputs(
        record_ids=["a"],
        fresh_target=[[A([-1.0])]],
        fresh_refs=[[A([[-3.0], [-0.5], [-2.0]])]],
        fixed_refs=[A([[1.0], [2.0], [3.0], [4.0], [5.0]])],
        fixed_ref_in=[A([True, False, True, False, False])],
        fixed_ref_cols=[A([10, 11, 12, 13, 14])],
    )


def test_first_m_keeps_the_first_m_in_and_out_references_in_order():
    cut = experiment_script("reference_curve").first_m_references
    one = cut(_inputs(), 1)
    assert one.fresh_refs[0][0].tolist() == [[-3.0]]
    assert one.fixed_refs[0].ravel().tolist() == [1.0, 2.0] and one.fixed_ref_in[0].tolist() == [True, False]
    assert one.fixed_ref_cols[0].tolist() == [10, 11]
    two = cut(_inputs(), 2)
    assert two.fixed_refs[0].ravel().tolist() == [1.0, 2.0, 3.0, 4.0] and two.fixed_ref_cols[0].tolist() == [10, 11, 12, 13]
    # Leaky's gap is target − max over the kept OUT references: −1 − (−3) = +2 with one; −1 − (−0.5) = −0.5 with two,
    # through the leaky slope 0.1: −0.05
    assert run_attack("leaky", one, LeakyParams()) == pytest.approx([2.0])
    assert run_attack("leaky", two, LeakyParams()) == pytest.approx([-0.05])
    # as many as the record has: unchanged
    assert cut(_inputs(), 3).fixed_refs[0].ravel().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_without_out_reference_drops_one_out_row_and_keeps_the_rest_in_order():
    drop = experiment_script("reference_curve").without_out_reference
    x = drop(_inputs(), 1)  # the 2nd OUT reference: fresh row 1 (−0.5); fixed OUT rows are 2.0, 4.0, 5.0 → drop 4.0
    assert x.fresh_refs[0][0].tolist() == [[-3.0], [-2.0]]
    assert x.fixed_refs[0].ravel().tolist() == [1.0, 2.0, 3.0, 5.0]
    assert x.fixed_ref_in[0].tolist() == [True, False, True, False] and x.fixed_ref_cols[0].tolist() == [10, 11, 12, 14]
    # Leaky over the rest: −1 − max(−3, −2) = +1
    assert run_attack("leaky", x, LeakyParams()) == pytest.approx([1.0])
