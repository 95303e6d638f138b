"""bench/bench_signals_parallel.py: the jobs it times are the real stage's, and its projection's arithmetic."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_signals_parallel

        yield bench_signals_parallel
    finally:
        sys.path.remove(str(BENCH))


def test_scoring_jobs_are_what_the_stage_gave_each_model(bench, tiny_study_run):
    """For the chosen targets, each chosen model scores exactly the records the finished stage recorded it scoring
    (signals/fresh/<target>/DONE's scored_by), so the bench times the stage's own work, not a stand-in."""
    _, root = tiny_study_run
    targets, fresh = bench.choose_jobs(root, 2)
    assert targets == ["math-s0", "math-s1"]  # the plan's first two trained targets
    expected: dict[str, list] = {m: [] for m in targets}
    for t in targets:
        scored_by = json.loads((root / "signals" / "fresh" / t / "DONE").read_text())["scored_by"]
        for m, ids in scored_by.items():
            if m in expected:
                expected[m].append([t, ids])
    assert fresh == expected
    assert [t for t, ids in fresh["math-s0"] if ids is None] == ["math-s0"]  # a target scores all its own records


def test_projection_by_hand(bench):
    """9 sampling jobs on 2 cores: local 9 x 10 s = 90 s; Ray 5 rounds x 16 s (a round lasts as long as its
    slowest job) = 80 s. Scoring 10 jobs: local 10 x 4 s = 40; Ray 5 x 7 = 35. Stage 130 / 115 = 1.13."""
    def shape(name, sample, score):
        return {"shape": name, "phases": {"sample": {"wall_s": 99.0, "processes": sample},
                                          "score": {"wall_s": 99.0, "processes": score}}}

    job = lambda s: {"wall_s": s}  # noqa: E731
    runs = [shape("local", [[job(9.0), job(11.0)]], [[job(4.0), job(4.0)]]),
            shape("ray", [[job(15.0)], [job(16.0)]], [[job(7.0)], [job(6.0)]]),
            shape("ray", [[job(16.0)], [job(14.0)]], [[job(5.0)], [job(7.0)]]),
            shape("local", [[job(10.0), job(10.0)]], [[job(3.0), job(5.0)]])]
    out = bench.project(runs, {"sample": 9, "score": 10}, 2)
    assert out["sample"] == {"jobs": 9, "local_s_per_job": 10.0, "ray_s_per_round": 16.0, "local_s": 90.0,
                             "ray_s": 80.0}
    assert out["score"]["local_s"] == 40.0 and out["score"]["ray_s"] == 35.0
    assert out["stage"] == {"local_s": 130.0, "ray_s": 115.0, "wall_ratio_local_over_ray": 1.13}
