"""Invariants of membership plans: balance, disjointness, determinism, fixed reference counts."""

import numpy as np
import pytest

from leakaudit.errors import ConfigError, InputError
from leakaudit.membership import (MembershipPlan, disjoint_plan, keep_matrix, keep_matrix_plan, split_pool,
                                 teacher_slice)


def _pools(n=30):
    return {"math": [f"m{i:03d}" for i in range(n)], "code": [f"c{i:03d}" for i in range(n)]}


def test_keep_matrix_is_balanced_per_record():
    keep = keep_matrix(6, 50, seed=3)
    assert keep.shape == (6, 50)
    assert (keep.sum(0) == 3).all()
    assert (keep.sum(1) == 25).all()  # every target sees equal numbers of members and non-members
    assert len({tuple(row) for row in keep}) == 6


def test_keep_matrix_rejects_odd_model_count():
    with pytest.raises(ConfigError, match="even"):
        keep_matrix(3, 10, seed=0)


def test_plan_invariants():
    plan = keep_matrix_plan(_pools(), n_students=4, n_candidates=12, n_population=8, seed=7)
    for domain in ("math", "code"):
        cand, pop = plan.candidates[domain], plan.population[domain]
        assert len(cand) == 12 and len(pop) == 8 and not set(cand) & set(pop)
        students = plan.models_of(domain, "student")
        assert students == [f"{domain}-s{j}" for j in range(4)]
        for rid in cand:
            assert sum(plan.is_member(m, rid) for m in students) == 2  # IN for exactly half
        # no student trains on a population record; the null student trains on population only
        for m in students:
            assert set(plan.members(m)) <= set(cand)
        null_members = plan.members(f"{domain}-null")
        assert len(null_members) == 6 and set(null_members) <= set(pop)
        assert not any(plan.labels(f"{domain}-null").values())


def test_plan_deterministic_and_seed_sensitive(tmp_path):
    a = keep_matrix_plan(_pools(), n_students=4, n_candidates=12, n_population=8, seed=7)
    b = keep_matrix_plan(_pools(), n_students=4, n_candidates=12, n_population=8, seed=7)
    c = keep_matrix_plan(_pools(), n_students=4, n_candidates=12, n_population=8, seed=8)
    assert a.equals(b)
    assert not a.equals(c)
    a.save(tmp_path)
    loaded = MembershipPlan.load(tmp_path)
    assert loaded.equals(a)
    assert loaded.members("math-s1") == a.members("math-s1")


def test_plan_independent_of_pool_order():
    pools = _pools()
    shuffled = {d: list(reversed(ids)) for d, ids in pools.items()}
    a = keep_matrix_plan(pools, n_students=4, n_candidates=12, n_population=8, seed=1)
    b = keep_matrix_plan(shuffled, n_students=4, n_candidates=12, n_population=8, seed=1)
    assert a.equals(b)


def test_references_have_fixed_count_regardless_of_membership():
    plan = keep_matrix_plan(_pools(), n_students=6, n_candidates=12, n_population=8, seed=2, null_student=False)
    target = "math-s0"
    for rid in plan.candidates["math"]:
        outs = plan.references_for(target, rid, member=False, k=2)
        ins = plan.references_for(target, rid, member=True, k=2)
        assert len(outs) == 2 and len(ins) == 2 and target not in outs + ins
        assert not any(plan.is_member(m, rid) for m in outs)
        assert all(plan.is_member(m, rid) for m in ins)
        assert outs == plan.references_for(target, rid, member=False, k=2)  # deterministic
    # k = M/2 = 3 OUT references exist only when the target itself is IN: asking for it must fail otherwise.
    out_record = next(r for r in plan.candidates["math"] if not plan.is_member(target, r))
    with pytest.raises(ConfigError, match="references"):
        plan.references_for(target, out_record, member=False, k=3)


def test_split_pool_errors():
    with pytest.raises(ConfigError, match="requested"):
        split_pool(["a", "b"], 2, 1, seed=0)
    with pytest.raises(InputError, match="duplicate"):
        split_pool(["a", "a", "b"], 1, 1, seed=0)


def test_teacher_slice_is_disjoint_and_leaves_the_split_unchanged():
    ids = [f"r{i:02d}" for i in range(30)]
    cand, pop = split_pool(ids, 8, 6, seed=3, salt="math")
    teach = teacher_slice(ids, 8, 6, 10, seed=3, salt="math")
    assert len(teach) == 10 and len(set(teach)) == 10
    assert not set(teach) & (set(cand) | set(pop))
    # asking for teacher records does not move a candidate or population record
    assert split_pool(ids, 8, 6, seed=3, salt="math", n_teacher=10) == (cand, pop)
    assert teacher_slice(list(reversed(ids)), 8, 6, 10, seed=3, salt="math") == teach
    with pytest.raises(ConfigError, match="10 teacher records"):
        teacher_slice(ids, 8, 14, 10, seed=3)


def test_disjoint_plan():
    cands = [f"x{i}" for i in range(10)]
    pop = [f"p{i}" for i in range(20)]
    plan = disjoint_plan(cands, pop, domain="math", n_references=3, records_per_reference=8, seed=0)
    for m in plan.models_of("math", "reference"):
        mem = plan.members(m)
        assert len(mem) == 8 and set(mem) <= set(pop)
    assert len({tuple(plan.members(m)) for m in plan.models}) == 3
    with pytest.raises(InputError, match="population"):
        disjoint_plan(cands, pop + ["x1"], domain="math", n_references=2, records_per_reference=4, seed=0)


def test_load_missing_file_names_it(tmp_path):
    with pytest.raises(InputError, match="plan.json"):
        MembershipPlan.load(tmp_path)


def test_members_and_nonmembers_are_random_not_positional():
    # Candidates are a seeded shuffle of the pool: the first half of the sorted pool is not all candidates.
    plan = keep_matrix_plan(_pools(60), n_students=2, n_candidates=20, n_population=10, seed=0)
    idx = sorted(int(r[1:]) for r in plan.candidates["math"])
    assert idx != list(range(20))
    assert np.mean(idx) > 10
