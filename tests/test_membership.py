"""Invariants of membership plans: balance, disjointness, determinism, fixed reference counts."""

import numpy as np
import pytest

from leakaudit.errors import ConfigError, InputError
from leakaudit.membership import (OFFLINE, MembershipPlan, background_slice, balanced_subsets_keep_matrix,
                                 disjoint_plan, keep_matrix, keep_matrix_plan, reference_slice, split_pool,
                                 teacher_slice)


def _pools(n=30):
    return {"math": [f"m{i:03d}" for i in range(n)], "code": [f"c{i:03d}" for i in range(n)]}


def test_keep_matrix_is_balanced_per_record():
    keep = keep_matrix(6, 50, seed=3)
    assert keep.shape == (6, 50)
    assert (keep.sum(0) == 3).all()
    assert (keep.sum(1) == 25).all()  # every target sees equal numbers of members and non-members
    assert len({tuple(row) for row in keep}) == 6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_balanced_subsets_use_every_half_equally(seed):
    from collections import Counter

    keep = balanced_subsets_keep_matrix(4, 24, seed=seed)
    assert (keep.sum(0) == 2).all() and (keep.sum(1) == 12).all()
    counts = Counter(tuple(np.flatnonzero(keep[:, j])) for j in range(24))
    assert len(counts) == 6 and set(counts.values()) == {4}  # C(4, 2) = 6 subsets, 24 / 6 each
    ragged = balanced_subsets_keep_matrix(4, 16, seed=seed)  # 16 is not a multiple of 6: within one
    assert (ragged.sum(0) == 2).all() and (ragged.sum(1) == 8).all()
    assert set(Counter(tuple(np.flatnonzero(ragged[:, j])) for j in range(16)).values()) <= {2, 3}
    wide = balanced_subsets_keep_matrix(6, 40, seed=seed)  # C(6, 3) = 20 subsets, each twice
    assert (wide.sum(0) == 3).all() and (wide.sum(1) == 20).all()
    assert set(Counter(tuple(np.flatnonzero(wide[:, j])) for j in range(40)).values()) == {2}


def test_balanced_subsets_make_the_forced_reference_independent_of_the_label():
    """With 4 students a target's non-member has exactly one other OUT student (its reference is forced); under
    balanced subsets every other student is that reference equally often, for members' OUT students too."""
    from collections import Counter

    plan = keep_matrix_plan(_pools(40), n_students=4, n_candidates=24, n_population=12, seed=5,
                            keep_design="balanced_subsets")
    assert plan.params["keep_design"] == "balanced_subsets"
    for target in plan.models_of("math", "student"):
        others = [m for m in plan.models_of("math", "student") if m != target]
        forced, member_outs = Counter(), Counter()
        for rid in plan.candidates["math"]:
            outs = [m for m in others if not plan.is_member(m, rid)]
            (member_outs if plan.is_member(target, rid) else forced).update(outs)
        assert sorted(forced.values()) == [4, 4, 4] and sorted(member_outs.values()) == [8, 8, 8]
    assert keep_matrix_plan(_pools(40), n_students=4, n_candidates=24, n_population=12, seed=5,
                            keep_design="balanced_subsets").equals(plan)
    with pytest.raises(ConfigError, match="keep_design"):
        keep_matrix_plan(_pools(), n_students=4, n_candidates=12, n_population=8, seed=5, keep_design="other")


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


def test_several_null_students_train_on_disjoint_population_and_take_distinct_label_sources(tmp_path):
    """plan.n_null_students: each null student trains on its own slice of population records (never a candidate,
    the same background as every student), and the k-th is attacked with the k-th student's labels, never using
    that student as a reference."""
    pools = _pools(40)
    background = {"math": [f"bg{i}" for i in range(3)]}
    one = keep_matrix_plan(pools, n_students=4, n_candidates=8, n_population=12, seed=5, background=background)
    three = keep_matrix_plan(pools, n_students=4, n_candidates=8, n_population=12, seed=5, background=background,
                             n_null_students=3)
    assert one.models_of("math", "null") == ["math-null"] and "n_null_students" not in one.params
    assert three.models_of("math", "null") == ["math-null", "math-null1", "math-null2"]
    assert three.params["n_null_students"] == 3
    # the same candidates, population, keep matrix and first null student as the one-null plan
    assert three.candidates == one.candidates and three.population == one.population
    assert three.keep("math")[2].tolist() == one.keep("math")[2].tolist()
    assert three.members("math-null") == one.members("math-null")
    pop, cand = set(three.population["math"]), set(three.candidates["math"])
    owns = [set(three.members(m)) - set(background["math"]) for m in three.models_of("math", "null")]
    assert all(len(o) == 4 and o <= pop and not o & cand for o in owns)
    assert not (owns[0] & owns[1] or owns[0] & owns[2] or owns[1] & owns[2])  # disjoint slices
    assert all(set(background["math"]) <= set(three.members(m)) for m in three.models_of("math", "null"))
    nulls = [v for v in three.views() if v.null_check and v.domain == "math"]
    assert [(v.target, v.label_source) for v in nulls] == [("math-null", "math-s0"), ("math-null1", "math-s1"),
                                                          ("math-null2", "math-s2")]
    k_in, k_out = three.reference_counts()
    for v in nulls:
        matched = three.matched_references(v, k_in, k_out)
        assert v.label_source not in matched.pool and v.label_source not in set(matched.outs.ravel())
        assert not set(matched.pool) & {n.target for n in nulls}  # a null student is never a reference
    three.save(tmp_path)
    assert MembershipPlan.load(tmp_path).equals(three)
    with pytest.raises(ConfigError, match="12 set aside"):  # 4 null students need 16 population records
        keep_matrix_plan(pools, n_students=4, n_candidates=8, n_population=12, seed=5, n_null_students=4)
    with pytest.raises(ConfigError, match="n_null_students"):  # more than there are label sources
        keep_matrix_plan(pools, n_students=4, n_candidates=8, n_population=40, seed=5, n_null_students=5)


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
    view = next(v for v in plan.views() if v.target == target)
    matched = plan.matched_references(view, 2, 2)
    assert matched.ins.shape == matched.outs.shape == (12, 2)
    for rid, ins, outs in zip(matched.record_ids, matched.ins, matched.outs):
        ins, outs = list(ins), list(outs)
        assert target not in outs + ins
        assert not any(plan.is_member(m, rid) for m in outs)
        assert all(plan.is_member(m, rid) for m in ins)
    again = plan.matched_references(view, 2, 2)  # deterministic
    assert (again.outs == matched.outs).all() and (again.ins == matched.ins).all()
    # k = M/2 = 3 OUT references exist only when the target itself is IN: asking for it must fail otherwise.
    with pytest.raises(ConfigError, match="references"):
        plan.matched_references(view, 0, 3)
    assert plan.reference_counts() == (2, 2) and plan.reference_counts(1) == (1, 1)


def test_keep_matrix_array_matches_the_table():
    plan = keep_matrix_plan(_pools(), n_students=4, n_candidates=12, n_population=8, seed=5)
    models, records, keep = plan.keep("math")
    assert models == ["math-s0", "math-s1", "math-s2", "math-s3"]  # never the null student
    assert keep.shape == (4, 12) and (keep.sum(0) == 2).all() and (keep.sum(1) == 6).all()
    for i, m in enumerate(models):
        assert [r for r, k in zip(records, keep[i]) if k] == plan.members(m)


def test_disjoint_audit_plan_holds_the_target_and_held_out_population():
    cands = [f"x{i}" for i in range(6)]
    pop = [f"p{i}" for i in range(12)]
    labels = {c: i % 2 == 0 for i, c in enumerate(cands)}
    plan = disjoint_plan(cands, pop, domain="math", n_references=3, records_per_reference=4, seed=0,
                         target_labels=labels, n_held_out=3)
    trained = set().union(*(plan.members(m) for m in plan.models_of("math", "reference")))
    assert len(set(pop) - trained) >= 3 and not trained & set(cands)
    assert plan.labels("target") == labels
    (view,) = plan.views()
    assert view.target == "target" and not view.null_check
    assert plan.reference_counts() == (0, 3)
    matched = plan.matched_references(view, *plan.reference_counts())
    assert all(sorted(o) == ["math-ref0", "math-ref1", "math-ref2"] for o in matched.outs)
    given = disjoint_plan(cands, pop, domain="math", n_references=0, records_per_reference=0, seed=0,
                          external_references=["/models/a", "/models/b"])
    assert given.models["math-ref1"]["path"] == "/models/b" and given.labels("target") == {}
    assert not any(given.members(m) for m in given.models)


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


def test_background_slice_is_disjoint_from_candidates_population_and_teacher_records():
    ids = [f"r{i:02d}" for i in range(40)]
    cand, pop = split_pool(ids, 8, 6, seed=3, salt="code")
    teach = teacher_slice(ids, 8, 6, 10, seed=3, salt="code")
    back = background_slice(ids, 8, 6, 10, 12, seed=3, salt="code")
    assert len(back) == 12 and len(set(back)) == 12
    assert not set(back) & (set(cand) | set(pop) | set(teach))
    # adding a background set moves no candidate, population or teacher record
    assert split_pool(ids, 8, 6, seed=3, salt="code", n_teacher=22) == (cand, pop)
    assert background_slice(list(reversed(ids)), 8, 6, 10, 12, seed=3, salt="code") == back
    with pytest.raises(ConfigError, match="requested"):
        background_slice(ids, 8, 6, 10, 17, seed=3)


def _background_plan(n_students=8, keep_design="balanced_subsets"):
    pools = {"code": [f"c{i:03d}" for i in range(40)], "math": [f"m{i:03d}" for i in range(40)]}
    background = {"code": [f"bc{i:02d}" for i in range(20)], "math": [f"bm{i:02d}" for i in range(10)]}
    return keep_matrix_plan(pools, n_students=n_students, n_candidates=24, n_population=12, seed=5,
                            keep_design=keep_design, background=background), background


def test_background_is_the_same_for_every_student_and_never_a_candidate():
    plan, background = _background_plan()
    for domain in ("code", "math"):
        cand, pop = set(plan.candidates[domain]), set(plan.population[domain])
        shared = set(background[domain])
        assert plan.background[domain] == background[domain]
        assert not shared & cand and not shared & pop
        students = plan.models_of(domain, "student")
        assert len(students) == 8
        for m in students + [f"{domain}-null"]:
            members = set(plan.members(m))
            assert members & shared == shared  # every trained model of the domain trains on all of it
            assert not members & set(background["math" if domain == "code" else "code"])  # never another domain's
        for m in students:  # besides the background: IN candidates only, 12 of 24 (a minority when |B| = 20)
            assert set(plan.members(m)) - shared <= cand and len(set(plan.members(m)) - shared) == 12
        assert set(plan.members(f"{domain}-null")) - shared <= pop
        for rid in cand:  # every candidate IN for exactly half the students
            assert sum(plan.is_member(m, rid) for m in students) == 4
        # the keep matrix and the labels see candidates only: the background changes neither
        models, records, keep = plan.keep(domain)
        assert records == plan.candidates[domain] and keep.sum(0).tolist() == [4] * 24
        assert set(plan.labels(students[0])) == cand


def test_background_leaves_the_keep_matrix_and_references_unchanged():
    with_bg, _ = _background_plan()
    pools = {"code": [f"c{i:03d}" for i in range(40)], "math": [f"m{i:03d}" for i in range(40)]}
    without = keep_matrix_plan(pools, n_students=8, n_candidates=24, n_population=12, seed=5,
                               keep_design="balanced_subsets")
    assert with_bg.candidates == without.candidates and with_bg.population == without.population
    assert (with_bg.keep("code")[2] == without.keep("code")[2]).all()
    view = with_bg.views()[0]
    k_in, k_out = with_bg.reference_counts()
    assert (k_in, k_out) == (3, 3)  # 8 students: 3 matched OUT (and IN) references for every record
    a = with_bg.matched_references(view, k_in, k_out)
    b = without.matched_references(view, k_in, k_out)
    assert (a.outs == b.outs).all() and (a.ins == b.ins).all()
    assert with_bg.params["n_background"] == {"code": 20, "math": 10} and "n_background" not in without.params


def test_background_plan_round_trips_and_old_plans_have_none(tmp_path):
    plan, _ = _background_plan()
    plan.save(tmp_path / "a")
    loaded = MembershipPlan.load(tmp_path / "a")
    assert loaded.equals(plan) and loaded.background == plan.background
    other, _ = _background_plan()
    other.background = {"code": other.background["code"][:-1], "math": other.background["math"]}
    assert not plan.equals(other)
    plain = keep_matrix_plan(_pools(), n_students=4, n_candidates=12, n_population=8, seed=7)
    plain.save(tmp_path / "b")
    assert "background" not in (tmp_path / "b" / "plan.json").read_text()
    assert MembershipPlan.load(tmp_path / "b").background == {}


def test_background_overlapping_the_pool_is_refused():
    pools = {"code": [f"c{i:03d}" for i in range(30)]}
    with pytest.raises(InputError, match="background"):
        keep_matrix_plan(pools, n_students=4, n_candidates=12, n_population=8, seed=0,
                         background={"code": ["c001", "x"]})
    with pytest.raises(ConfigError, match="unknown domains"):
        keep_matrix_plan(pools, n_students=4, n_candidates=12, n_population=8, seed=0, background={"math": ["x"]})


def _offline_plan(n_offline=3):
    pools = {"code": [f"c{i:03d}" for i in range(40)]}
    background = {"code": [f"b{i:02d}" for i in range(10)]}
    reference = {"code": [f"r{i:02d}" for i in range(20)]}
    return keep_matrix_plan(pools, n_students=4, n_candidates=16, n_population=8, seed=2,
                            keep_design="balanced_subsets", background=background, n_offline=n_offline,
                            reference_records=reference), background, reference


def test_offline_references_never_see_a_candidate_and_serve_every_target():
    plan, background, reference = _offline_plan()
    cand, pop = set(plan.candidates["code"]), set(plan.population["code"])
    offline = plan.models_of("code", OFFLINE)
    assert offline == ["code-off0", "code-off1", "code-off2"]
    draws = []
    for m in offline:
        members = set(plan.members(m))
        assert not members & (cand | pop)
        assert set(background["code"]) <= members
        own = members - set(background["code"])
        assert own <= set(reference["code"]) and len(own) == 8  # as many own records as a student (16/2)
        draws.append(frozenset(own))
    assert len(set(draws)) == 3  # each reference its own seeded draw
    for m in plan.models_of("code", "student") + ["code-null"]:  # no student or null trains on reference records
        assert not set(plan.members(m)) & set(reference["code"])
    # the keep matrix and the matched references ignore the offline references
    models, _, _ = plan.keep("code")
    assert not set(models) & set(offline)
    plain = keep_matrix_plan({"code": [f"c{i:03d}" for i in range(40)]}, n_students=4, n_candidates=16,
                             n_population=8, seed=2, keep_design="balanced_subsets", background=background)
    assert plan.views() == plain.views() and plain.offline_views() == []
    # every view again, compared with all offline references, OUT for every candidate
    off_views = plan.offline_views()
    assert [(v.target, v.label_source, v.null_check) for v in off_views] == \
        [(v.target, v.label_source, v.null_check) for v in plan.views()]
    for v in off_views:
        refs = plan.references(v, 1, 1)
        assert refs.ins.shape == (16, 0) and refs.outs.shape == (16, 3)
        assert all(list(row) == offline for row in refs.outs) and refs.pool == offline
        assert refs.fresh_scorers(v.target, "base") == {v.target: None, "base": None,
                                                         **{m: plan.candidates["code"] for m in offline}}
    matched = plan.references(plan.views()[0], 1, 1)
    assert not set(matched.pool) & set(offline)


def test_reference_slice_follows_the_background():
    ids = [f"r{i:02d}" for i in range(50)]
    back = background_slice(ids, 8, 6, 10, 12, seed=3, salt="code")
    ref = reference_slice(ids, 8, 6, 10, 12, 9, seed=3, salt="code")
    cand, pop = split_pool(ids, 8, 6, seed=3, salt="code")
    assert len(ref) == 9 and not set(ref) & (set(back) | set(cand) | set(pop)
                                             | set(teacher_slice(ids, 8, 6, 10, seed=3, salt="code")))


def test_offline_references_need_enough_reference_records():
    pools = {"code": [f"c{i:03d}" for i in range(40)]}
    with pytest.raises(ConfigError, match="n_reference_records"):
        keep_matrix_plan(pools, n_students=4, n_candidates=16, n_population=8, seed=2, n_offline=2,
                         reference_records={"code": ["r1", "r2"]})
    with pytest.raises(InputError, match="reference-only record"):
        keep_matrix_plan(pools, n_students=4, n_candidates=16, n_population=8, seed=2, n_offline=1,
                         reference_records={"code": [f"c{i:03d}" for i in range(8)]})


def test_disjoint_plan():
    cands = [f"x{i}" for i in range(10)]
    pop = [f"p{i}" for i in range(20)]
    plan = disjoint_plan(cands, pop, domain="math", n_references=3, records_per_reference=8, seed=0)
    for m in plan.models_of("math", "reference"):
        mem = plan.members(m)
        assert len(mem) == 8 and set(mem) <= set(pop)
    assert len({tuple(plan.members(m)) for m in plan.models_of("math", "reference")}) == 3
    with pytest.raises(InputError, match="population"):
        disjoint_plan(cands, pop + ["x1"], domain="math", n_references=2, records_per_reference=4, seed=0)


def test_load_missing_file_names_it(tmp_path):
    with pytest.raises(InputError, match="plan.json"):
        MembershipPlan.load(tmp_path)


def test_members_and_nonmembers_are_random_not_positional():
    # Candidates are a seeded shuffle of the pool: the first half of the sorted pool is not all candidates.
    plan = keep_matrix_plan(_pools(60), n_students=4, n_candidates=20, n_population=10, seed=0)
    idx = sorted(int(r[1:]) for r in plan.candidates["math"])
    assert idx != list(range(20))
    assert np.mean(idx) > 10


def _hand_plan(in_sets: list[tuple[int, int]]) -> MembershipPlan:
    """4 students s0..s3 of domain 'code'; candidate r<i> is IN for the two students in in_sets[i]."""
    import pandas as pd

    models = {f"code-s{j}": {"domain": "code", "role": "student"} for j in range(4)}
    cands = [f"r{i}" for i in range(len(in_sets))]
    rows = [(rid, f"code-s{j}", j in pair) for rid, pair in zip(cands, in_sets) for j in range(4)]
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    return MembershipPlan("keep_matrix", 0, {"n_students": 4}, models, {"code": cands}, {"code": []}, table)


def test_reference_balance_golden_values():
    from leakaudit.assemble import reference_balance

    # every target's members share one IN-set and its non-members the complement: the reference is the label
    skewed = {r["target"]: r for r in reference_balance(_hand_plan([(0, 1)] * 3 + [(2, 3)] * 3), k_refs=1)}
    assert skewed["code-s0"]["refs_nonmembers"] == {"code-s1": 3}  # non-members' only other OUT student
    assert set(skewed["code-s0"]["refs_members"]) <= {"code-s2", "code-s3"}
    assert all(r["tvd"] == 1.0 for r in skewed.values())
    # each of the 6 IN-sets once: target s0's non-members r3 {1,2}, r4 {1,3}, r5 {2,3} get s3, s2, s1
    every = {r["target"]: r for r in reference_balance(
        _hand_plan([(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]), k_refs=1)}
    assert every["code-s0"]["refs_nonmembers"] == {"code-s1": 1, "code-s2": 1, "code-s3": 1}
    members = every["code-s0"]["refs_members"]  # r0 {0,1} -> s2|s3, r1 {0,2} -> s1|s3, r2 {0,3} -> s1|s2
    expected_tvd = 0.5 * sum(abs(members.get(m, 0) / 3 - 1 / 3) for m in ("code-s1", "code-s2", "code-s3"))
    assert every["code-s0"]["tvd"] == pytest.approx(expected_tvd, abs=1e-4)


def test_report_warns_when_reference_identity_gives_the_label_away(tmp_path):
    import json

    from fake_run import write_fake_run
    from leakaudit.report import build_report

    root = write_fake_run(tmp_path / "study")
    _hand_plan([(0, 1)] * 3 + [(2, 3)] * 3).save(root)
    html = build_report(root, n_boot=50).read_text()
    assert "Reference identity is tied to membership (largest distance 1.00)" in html
    balance = json.loads((root / "metrics.json").read_text())["reference_balance"]
    assert [r["tvd"] for r in balance] == [1.0] * 4


def test_a_pool_too_small_names_each_part_it_was_asked_for():
    ids = [f"r{i}" for i in range(40)]
    with pytest.raises(ConfigError, match="8 candidates \\+ 8 population \\+ 16 teacher records \\+ 16 background records"
                                          " \\+ 4 reference-only records requested"):
        split_pool(ids, 8, 8, 0, salt="code", n_teacher=36,
                   parts={"teacher": 16, "background": 16, "reference-only": 4})
    with pytest.raises(ConfigError, match="8 candidates \\+ 8 population \\+ 30 teacher records requested"):
        split_pool(ids, 8, 8, 0, n_teacher=30)  # without parts, as before
