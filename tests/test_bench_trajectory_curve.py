"""bench/trajectory_curve.py: cutting every record's fresh signals to its first k trajectories."""

from __future__ import annotations

import numpy as np
import pytest

from attacks import run_attack
from attacks.base import AttackInputs
from attacks.leaky import LeakyParams
from conftest import bench_script

A = np.asarray


def _inputs() -> AttackInputs:
    # record a: three trajectories with gaps (target − max ref) +1, −1, +3; record b: one trajectory, gap −2.
    return AttackInputs(
        record_ids=["a", "b"],
        fresh_target=[[A([-1.0]), A([-2.0]), A([0.0])], [A([-3.0])]],
        fresh_refs=[[A([[-2.0], [-3.0]]), A([[-1.0], [-4.0]]), A([[-3.0], [-5.0]])], [A([[-1.0], [-2.0]])]],
    )


def test_first_k_keeps_the_first_trajectories_of_each_record():
    first_k = bench_script("trajectory_curve").first_k
    x = first_k(_inputs(), 2)
    assert [len(t) for t in x.fresh_target] == [2, 1] and [len(r) for r in x.fresh_refs] == [2, 1]
    assert x.fresh_base is None and x.record_ids == ["a", "b"]
    # Leaky (slope 0.1) of record a over its first two trajectories: mean(+1, 0.1 · −1) = 0.45; b: 0.1 · −2
    assert run_attack("leaky", x, LeakyParams()) == pytest.approx([0.45, -0.2])
    # all three: mean(+1, −0.1, +3) = 1.3
    full = first_k(_inputs(), 3)
    assert run_attack("leaky", full, LeakyParams()) == pytest.approx([1.3, -0.2])
