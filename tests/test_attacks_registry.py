"""The registry, the runner's output contract, parameter range checks and AttackInputs.validate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import attacks
from attacks import AttackContractError, AttackInputs, NoParams, get_attack, list_attacks, register, run_attack
from attacks.errors import AttackConfigError, AttackInputError
from attacks.leaky import LeakyParams

A = np.array

EXPECTED = {
    "leaky": "fresh", "fresh_loss": "fresh", "fresh_gap_max": "fresh", "fresh_gap_mean": "fresh",
    "fresh_gap_base": "fresh", "loss": "fixed", "zlib": "fixed", "min_k": "fixed", "min_k_plus_plus": "fixed",
    "ref_ratio_base": "fixed", "ref_ratio_refs": "fixed", "lira_online": "fixed", "lira_offline": "fixed",
    "rmia": "fixed", "blind_text": "blind",
}


def test_registry_lists_every_attack_with_family_needs_and_documented_defaults():
    specs = {s.name: s for s in list_attacks()}
    assert {n: s.family for n, s in specs.items()} == EXPECTED
    assert specs["leaky"].needs == ("fresh_target", "fresh_refs")
    assert specs["blind_text"].needs == ("texts", "labels")
    assert "labels" not in {n for s in specs.values() if s.family != "blind" for n in s.needs}
    leaky = {p.name: p for p in specs["leaky"].params}
    assert leaky["slope"].default == 0.1 and leaky["max_tokens"].default is None
    assert leaky["reference_reduction"].default == "max"
    for spec in specs.values():
        assert spec.description
        for p in spec.params:
            assert p.doc, f"{spec.name}.{p.name} has no docstring"
        spec.make_params()  # defaults pass their own range checks


def test_params_as_dict_or_dataclass_agree_and_unknown_keys_fail():
    x = _fresh()
    np.testing.assert_array_equal(run_attack("leaky", x, {"slope": 0.0}),
                                  run_attack("leaky", x, LeakyParams(slope=0.0)))
    with pytest.raises(AttackConfigError, match="unknown parameter"):
        run_attack("leaky", x, {"slop": 0.0})
    with pytest.raises(AttackConfigError, match="unknown parameter"):
        run_attack("loss", x, {"k": 0.2})
    with pytest.raises(AttackConfigError, match="params must be"):
        run_attack("leaky", x, [0.1])
    with pytest.raises(AttackConfigError, match="unknown attack 'nope'"):
        run_attack("nope", x)


@pytest.mark.parametrize("name, params", [
    ("leaky", {"slope": -0.1}), ("leaky", {"slope": 1.5}), ("leaky", {"slope": "0.1"}),
    ("leaky", {"slope": float("nan")}), ("leaky", {"token_aggregation": "median"}),
    ("leaky", {"topk_fraction": 0.0}), ("leaky", {"topk_fraction": 1.01}),
    ("leaky", {"reference_reduction": "min"}), ("leaky", {"max_tokens": 0}), ("leaky", {"max_tokens": 2.5}),
    ("leaky", {"max_tokens": True}),
    ("fresh_loss", {"max_tokens": 0}), ("fresh_gap_max", {"max_tokens": -1}),
    ("fresh_gap_mean", {"max_tokens": 0}), ("fresh_gap_base", {"max_tokens": 0}),
    ("min_k", {"k": 0.0}), ("min_k", {"k": 1.1}), ("min_k_plus_plus", {"k": -0.2}),
    ("lira_online", {"min_std": 0.0}), ("lira_offline", {"global_variance": "yes"}),
    ("rmia", {"a": 1.5}), ("rmia", {"a": -0.1}), ("rmia", {"gamma": 0.0}), ("rmia", {"offline": 1}),
    ("blind_text", {"n_splits": 1}), ("blind_text", {"vectorizer": "bert"}), ("blind_text", {"ngram_max": 4}),
    ("blind_text", {"C": 0.0}), ("blind_text", {"seed": -1}),
])
def test_param_range_checks_raise_config_error(name, params):
    with pytest.raises(AttackConfigError):
        get_attack(name).make_params(params)


def test_param_edges_are_accepted():
    LeakyParams(slope=0.0)
    LeakyParams(slope=1.0, topk_fraction=1.0, max_tokens=1)
    get_attack("rmia").make_params({"a": 0.0})
    get_attack("rmia").make_params({"a": 1.0})


def _three():
    return AttackInputs(record_ids=["P", "Q", "E"], fixed_target=[A([-1.0]), A([-2.0]), A([-3.0])])


def _fresh(**kw):
    base = dict(record_ids=["a", "b"], fresh_target=[[A([-1.0, -2.0])], [A([-1.0])]],
                fresh_refs=[[A([[-1.0, -2.0]])], [A([[-1.0]])]], fresh_base=[[A([-1.0, -2.0])], [A([-1.0])]])
    base.update(kw)
    return AttackInputs(**base)


def _bad(name, out_fn):
    @register(name, NoParams, needs=("fixed_target",), family="fixed", description="deliberately broken")
    def fn(inputs, params):
        return out_fn(inputs.n)
    return fn


@pytest.mark.parametrize("out_fn, match", [
    (lambda n: np.zeros(n + 1), r"shape \(4,\), expected \(3,\)"),
    (lambda n: np.zeros((n, 1)), r"shape \(3, 1\)"),
    (lambda n: np.zeros(n, dtype=np.float32), "dtype float32"),
    (lambda n: [0.0] * n, "not a numpy array"),
    (lambda n: np.array([0.0, np.inf, 1.0]), r"infinite scores for \['Q'\]"),
])
def test_run_attack_rejects_bad_output(out_fn, match):
    _bad("_test_bad", out_fn)
    try:
        with pytest.raises(AttackContractError, match=match):
            run_attack("_test_bad", _three())
    finally:
        attacks.unregister("_test_bad")
    assert "_test_bad" not in {s.name for s in list_attacks()}


def test_run_attack_keeps_nan_from_an_attack():
    _bad("_test_nan", lambda n: np.array([np.nan, 0.0, 1.0]))
    try:
        assert np.isnan(run_attack("_test_nan", _three())[0])
    finally:
        attacks.unregister("_test_nan")


def test_an_attack_sees_only_the_fields_it_declares():
    # Every field is filled in, labels included; an attack declaring needs=("fixed_target",) must get them all
    # as None except record_ids and fixed_target, while blind_text (needs texts, labels) still gets the labels.
    full = AttackInputs(record_ids=["a", "b", "c", "d"],
                        texts=["alpha common", "alpha common", "beta common", "beta common"],
                        fixed_target=[A([-1.0])] * 4, fresh_target=[[A([-1.0])]] * 4,
                        fresh_refs=[[A([[-1.0]])]] * 4, fixed_refs=[A([[-1.0]])] * 4,
                        fixed_ref_in=[A([False])] * 4,
                        population_target=A([-1.0]), population_refs=A([[-1.0]]), labels=A([1, 1, 0, 0]))
    seen = {}

    @register("_test_sees", NoParams, needs=("fixed_target",), family="fixed", description="records its inputs")
    def fn(inputs, params):
        seen["inputs"] = inputs
        return np.zeros(inputs.n)

    try:
        run_attack("_test_sees", full)
    finally:
        attacks.unregister("_test_sees")
    got = seen["inputs"]
    assert got.record_ids == full.record_ids and got.fixed_target is full.fixed_target
    assert got.labels is None and got.fresh_refs is None
    assert all(getattr(got, f) is None for f in attacks.base.INPUT_FIELDS if f != "fixed_target")
    assert full.labels is not None and full.fresh_refs is not None  # the caller's inputs are untouched

    def spy(inputs, params):
        seen["blind"] = inputs
        return np.zeros(inputs.n)

    spec = get_attack("blind_text")
    attacks.registry._REGISTRY["blind_text"] = dataclasses.replace(spec, fn=spy)
    try:
        run_attack("blind_text", full, {"n_splits": 2})
    finally:
        attacks.registry._REGISTRY["blind_text"] = spec
    np.testing.assert_array_equal(seen["blind"].labels, full.labels)
    assert seen["blind"].texts == full.texts and seen["blind"].fixed_target is None
    assert np.isfinite(run_attack("blind_text", full, {"n_splits": 2, "ngram_max": 1})).all()
    # Only RMIA compares a record with population records; LiRA and ref_ratio_refs use the record's own
    # fixed_refs rows alone, so they cannot mix reference sets (they are not handed population_refs at all).
    for name in ("lira_online", "lira_offline", "ref_ratio_refs"):
        assert not {"population_target", "population_refs", "fixed_ref_cols"} & set(get_attack(name).needs)


def test_register_refuses_member_low_attacks_bad_family_needs_and_duplicates():
    with pytest.raises(AttackConfigError, match="higher = more likely member"):
        register("_x", NoParams, needs=(), family="fixed", description="", higher_is_member=False)
    with pytest.raises(AttackConfigError, match="family"):
        register("_x", NoParams, needs=(), family="other", description="")
    with pytest.raises(AttackConfigError, match="unknown AttackInputs field"):
        register("_x", NoParams, needs=("fixed_targets",), family="fixed", description="")
    with pytest.raises(AttackConfigError, match="already registered"):
        register("loss", NoParams, needs=(), family="fixed", description="")(lambda i, p: None)
    assert get_attack("loss").description.startswith("mean log p_target")


def test_missing_needs_name_the_field():
    x = AttackInputs(record_ids=["a"], fixed_target=[A([-1.0])])
    with pytest.raises(AttackInputError, match="fresh_target"):
        run_attack("leaky", x)
    with pytest.raises(AttackInputError, match="texts"):
        run_attack("zlib", x)
    with pytest.raises(AttackInputError, match="population_target"):
        run_attack("rmia", AttackInputs(record_ids=["a"], fixed_target=[A([-1.0])], fixed_refs=[A([[-1.0]])],
                                        fixed_ref_in=[A([False])]))
    with pytest.raises(AttackInputError, match="fixed_ref_cols"):
        run_attack("rmia", AttackInputs(record_ids=["a"], fixed_target=[A([-1.0])], fixed_refs=[A([[-1.0]])],
                                        fixed_ref_in=[A([False])], population_target=A([-1.0]),
                                        population_refs=A([[-1.0]])))


# -- validate: shapes, lengths, finiteness; the record is named ---------------------------------------


@pytest.mark.parametrize("kw, match", [
    (dict(record_ids=["a", "a"]), "record a.*duplicate"),
    (dict(fresh_target=[[A([-1.0, -2.0])]]), "1 entries for 2 record_ids"),
    (dict(fresh_refs=[[A([[-1.0, -2.0]])], [A([[-1.0, -1.0]])]]), "record b.*fresh_refs.*2 tokens, fresh_target 1"),
    (dict(fresh_refs=[[A([[-1.0, -2.0]])], [A([-1.0])]]), "record b.*fresh_refs.*2-D"),
    (dict(fresh_refs=[[A([[-1.0, -2.0]])], [A([[-1.0]]), A([[-1.0]])]]), "record b.*2 trajectories"),
    (dict(fresh_base=[[A([-1.0, np.nan])], [A([-1.0])]]), "record a.*fresh_base.*non-finite"),
    (dict(fresh_target=[[A([-1.0, -2.0])], A([-1.0])]), "record b.*list of per-trajectory"),
    (dict(fresh_target=[[A([-1, -2])], [A([-1.0])]]), "record a.*float array"),
])
def test_validate_fresh_names_record_and_field(kw, match):
    with pytest.raises(AttackInputError, match=match):
        run_attack("leaky" if "fresh_base" not in kw else "fresh_gap_base", _fresh(**kw))


@pytest.mark.parametrize("kw, match", [
    (dict(fixed_refs=[A([[-1.0, -1.0]]), A([[-1.0]])]), "record a.*fixed_refs.*2 tokens, fixed_target 1"),
    (dict(fixed_ref_in=[A([1]), A([True])]), "record a.*fixed_ref_in.*bool"),
    (dict(fixed_ref_in=[A([True, False]), A([True])]), "record a.*2 flags for 1"),
    (dict(fixed_target=[A([np.inf]), A([-1.0])]), "record a.*fixed_target.*non-finite"),
    (dict(population_refs=A([[-1.0], [-1.0]])), "population_refs.*2 rows, population_target 1"),
    (dict(population_target=A([]), population_refs=np.zeros((0, 1))), "non-empty"),
    (dict(fixed_ref_cols=[A([0.0]), A([0])]), "record a.*fixed_ref_cols.*integer"),
    (dict(fixed_ref_cols=[A([True]), A([0])]), "record a.*fixed_ref_cols.*integer"),
    (dict(fixed_ref_cols=[A([[0]]), A([0])]), "record a.*fixed_ref_cols.*1-D"),
    (dict(fixed_ref_cols=[A([0]), A([0, 1])]), "record b.*fixed_ref_cols.*2 columns for 1"),
    (dict(fixed_ref_cols=[A([0]), A([1])]), r"record b.*fixed_ref_cols.*outside \[0, 1\)"),
    (dict(fixed_ref_cols=[A([-1]), A([0])]), "record a.*fixed_ref_cols.*outside"),
    (dict(fixed_refs=[A([[-1.0], [-1.0]]), A([[-1.0]])], fixed_ref_in=[A([True, False]), A([False])],
          fixed_ref_cols=[A([0, 0]), A([0])], population_refs=A([[-1.0, -1.0]])), "record a.*column twice"),
])
def test_validate_fixed_names_record_and_field(kw, match):
    base = dict(record_ids=["a", "b"], fixed_target=[A([-1.0]), A([-1.0])], fixed_refs=[A([[-1.0]]), A([[-1.0]])],
                fixed_ref_in=[A([True]), A([False])], fixed_ref_cols=[A([0]), A([0])],
                population_target=A([-1.0]), population_refs=A([[-1.0]]))
    base.update(kw)
    with pytest.raises(AttackInputError, match=match):
        run_attack("rmia", AttackInputs(**base), {"offline": True})


def test_validate_sigma_and_labels():
    x = AttackInputs(record_ids=["a"], fixed_target=[A([-1.0])], fixed_target_mu=[A([-1.0])],
                     fixed_target_sigma=[A([-0.5])])
    with pytest.raises(AttackInputError, match="record a.*negative"):
        run_attack("min_k_plus_plus", x)
    y = AttackInputs(record_ids=["a", "b"], texts=["x", "y"], labels=A([0, 2]))
    with pytest.raises(AttackInputError, match="labels"):
        run_attack("blind_text", y)


def test_missing_reference_kind_is_an_input_error_not_nan():
    # Online LiRA/RMIA need IN and OUT references; ref_ratio_refs and offline variants need OUT only.
    x = AttackInputs(record_ids=["a", "b"], fixed_target=[A([-1.0]), A([-1.0])],
                     fixed_refs=[A([[-1.0], [-2.0]]), A([[-1.0], [-2.0]])],
                     fixed_ref_in=[A([True, False]), A([False, False])], fixed_ref_cols=[A([0, 1]), A([0, 1])],
                     population_target=A([-1.0]), population_refs=A([[-1.0, -1.0]]))
    for name in ("lira_online", "rmia"):
        with pytest.raises(AttackInputError, match="record b.*at least one IN"):
            run_attack(name, x)
    assert np.isfinite(run_attack("lira_offline", x)).all()
    assert np.isfinite(run_attack("rmia", x, {"offline": True})).all()
    x.fixed_ref_in = [A([True, True]), A([False, False])]
    for name in ("lira_offline", "ref_ratio_refs"):
        with pytest.raises(AttackInputError, match="record a.*at least one OUT"):
            run_attack(name, x)


def test_blind_text_needs_enough_of_each_class():
    x = AttackInputs(record_ids=list("abcd"), texts=["a b"] * 4, labels=A([1, 0, 0, 0]))
    with pytest.raises(AttackInputError, match="1 members, 3 non-members"):
        run_attack("blind_text", x, {"n_splits": 2})
