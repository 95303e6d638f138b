"""Golden values for leakaudit.metrics, computed by hand in the comments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from fake_run import fake_scores
from leakaudit.errors import InputError
from leakaudit.metrics import (POOLED, SingleClassError, _auc_statistic, roc_metrics, summarise,
                               tpr_at_fpr)

# 3 members, 3 non-members; one member/non-member tie at 0.8.
Y = [1, 1, 0, 1, 0, 0]
S = [0.9, 0.8, 0.8, 0.7, 0.3, 0.1]


def test_auroc_hand_example():
    # pairs won by members: 0.9 -> 3; 0.8 -> 2 + ½ (tie); 0.7 -> 2  => 7.5 / 9
    assert roc_metrics(Y, S, n_boot=0)["auroc"] == pytest.approx(7.5 / 9)


def test_tpr_at_fpr_with_ties():
    # ROC points (fpr, tpr): (0,0) (0,1/3) (1/3,2/3) (1/3,1) (2/3,1) (1,1); the tie at 0.8 is one threshold,
    # so at FPR 0 only the 0.9 member is caught.
    assert tpr_at_fpr(Y, S, 0.0) == pytest.approx(1 / 3)
    assert tpr_at_fpr(Y, S, 0.1) == pytest.approx(1 / 3)
    assert tpr_at_fpr(Y, S, 1 / 3) == pytest.approx(1.0)


def test_tie_at_the_top_gives_zero_tpr_at_zero_fpr():
    # top score 0.5 shared by a member and a non-member: nothing is caught without a false positive
    y, s = [1, 0, 1, 0], [0.5, 0.5, 0.2, 0.1]
    assert tpr_at_fpr(y, s, 0.49) == 0.0
    assert tpr_at_fpr(y, s, 0.5) == 1.0


def test_nan_scores_are_lowest_and_counted():
    # member NaN vs non-members 0.2 (loses) and NaN (tie ½); member 0.5 beats both => 2.5 / 4
    m = roc_metrics([1, 0, 1, 0], [np.nan, 0.2, 0.5, np.nan], n_boot=0)
    assert m["auroc"] == pytest.approx(0.625)
    assert m["n_nan"] == 2 and m["n_pos"] == 2 and m["n_neg"] == 2


def test_infinite_scores_are_ranked():
    m = roc_metrics([1, 0, 1, 0], [np.inf, -np.inf, 0.0, 1.0], n_boot=0)
    assert m["auroc"] == pytest.approx(0.75)  # inf beats both; 0.0 beats -inf only


def test_single_class_is_a_clear_error():
    with pytest.raises(SingleClassError, match="members and non-members"):
        roc_metrics([1, 1, 1], [0.1, 0.2, 0.3])
    assert issubclass(SingleClassError, InputError)
    with pytest.raises(InputError, match="0/1"):
        roc_metrics([2, 0], [0.1, 0.2])


def test_resolvable_flags_follow_alpha_times_n_neg():
    y = np.r_[np.ones(10), np.zeros(100)]
    m = roc_metrics(y, np.arange(110.0), n_boot=0)
    assert (m["resolvable@0.1"], m["resolvable@0.01"], m["resolvable@0.001"]) == (True, True, False)
    assert set(m) >= {"auroc", "auroc_lo", "auroc_hi", "tpr@0.1", "tpr@0.01", "tpr@0.001", "n_pos", "n_neg", "n_nan"}


def test_bootstrap_ci_contains_point_and_is_seeded():
    rng = np.random.default_rng(1)
    y = np.arange(200) % 2
    s = rng.normal(size=200) + 0.8 * y
    a = roc_metrics(y, s, n_boot=500, seed=3)
    b = roc_metrics(y, s, n_boot=500, seed=3)
    c = roc_metrics(y, s, n_boot=500, seed=4)
    assert a["auroc_lo"] < a["auroc"] < a["auroc_hi"]
    assert (a["auroc_lo"], a["auroc_hi"]) == (b["auroc_lo"], b["auroc_hi"])
    assert (a["auroc_lo"], a["auroc_hi"]) != (c["auroc_lo"], c["auroc_hi"])
    assert a["auroc_hi"] - a["auroc_lo"] < 0.2


def test_vectorised_auc_matches_sklearn_with_ties():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300).astype(bool)
    s = np.round(rng.normal(size=300) + y, 1)  # many ties
    assert _auc_statistic(s[y], s[~y]) == pytest.approx(roc_auc_score(y, s))


def test_summarise_levels_and_counts():
    m = summarise(fake_scores(), n_boot=50, seed=0)
    real, null = m[~m["null_check"]], m[m["null_check"]]
    # 4 attacks x (4 targets, 2 domains, 1 overall); null target (math only): 4 x (1, 1, 1)
    assert real["level"].value_counts().to_dict() == {"target": 16, "domain": 8, "all": 4}
    assert null["level"].value_counts().to_dict() == {"target": 4, "domain": 4, "all": 4}
    overall = real[real["level"] == "all"].set_index("attack")
    assert (overall["n_pos"] == 80).all() and (overall["n_neg"] == 80).all()  # null target never pooled in
    assert (overall["target"] == POOLED).all() and (overall["domain"] == POOLED).all()
    assert overall.loc["loss", "n_nan"] == 8 and overall.loc["leaky", "n_nan"] == 0
    assert overall.loc["leaky", "n_targets"] == 4
    assert null[null["level"] == "all"]["n_pos"].eq(20).all()
    dom = real[(real["level"] == "domain") & (real["attack"] == "leaky")].set_index("domain")
    assert dom.loc["math", "n_pos"] == 40 and dom.loc["math", "n_targets"] == 2
    assert overall.loc["leaky", "auroc"] > 0.9 > overall.loc["blind_text", "auroc"]


def test_summarise_keeps_single_class_groups_as_nan():
    df = fake_scores()
    df = df[~((df["target"] == "code-0") & ~df["is_member"])]  # code-0: members only
    m = summarise(df, n_boot=0, seed=0)
    row = m[(m["level"] == "target") & (m["target"] == "code-0") & (m["attack"] == "leaky")].iloc[0]
    assert np.isnan(row["auroc"]) and row["n_pos"] == 20 and row["n_neg"] == 0


def test_cluster_bootstrap_ignores_duplicated_rows_and_is_wider_than_row_bootstrap():
    """Pooled over targets a record appears once per target: the CI must resample records, not rows."""
    import numpy as np

    from leakaudit.metrics import auroc_ci, cluster_auroc_ci, roc_metrics

    rng = np.random.default_rng(0)
    y = np.array([True] * 10 + [False] * 10)
    s = rng.normal(size=20) + 0.8 * y
    ids = np.array([f"r{i}" for i in range(20)])
    single = cluster_auroc_ci(y, s, ids, n_boot=400, seed=3)
    # the same 20 records repeated 4 times (identical rows): weights scale uniformly, so the CI is identical
    y4, s4, ids4 = np.tile(y, 4), np.tile(s, 4), np.tile(ids, 4)
    assert cluster_auroc_ci(y4, s4, ids4, n_boot=400, seed=3) == pytest.approx(single)
    row_lo, row_hi = auroc_ci(y4, s4, n_boot=400, seed=3)
    assert (row_hi - row_lo) < 0.7 * (single[1] - single[0])  # treating copies as independent is too narrow
    m = roc_metrics(y4, s4, n_boot=400, seed=3, clusters=ids4)
    assert m["auroc_lo"] == pytest.approx(single[0]) and m["auroc_lo"] <= m["auroc"] <= m["auroc_hi"]


@pytest.mark.parametrize("which", ["auroc_ci", "cluster_auroc_ci"])
def test_bootstrap_cis_read_0_1_integer_labels_as_bool(which):
    """0/1 int labels used to index the scores (s[y] took rows 0 and 1 over and over): experiments/pass_curve.py's first
    run printed AUROC 0.576 with a 'CI' of [0.125, 0.406]. Now the same CI as bool labels, and it holds the AUROC."""
    import numpy as np

    from leakaudit import metrics

    rng = np.random.default_rng(1)
    y = np.array([True] * 12 + [False] * 12)
    s = rng.normal(size=24) + 0.5 * y
    ci = getattr(metrics, which)
    extra = {"clusters": np.arange(24)} if which == "cluster_auroc_ci" else {}
    as_bool = ci(y, s, n_boot=300, seed=2, **extra)
    as_int = ci(y.astype(int), list(s), n_boot=300, seed=2, **extra)
    assert as_int == pytest.approx(as_bool)
    assert as_bool[0] <= metrics.auroc(y, s) <= as_bool[1]


# --- paired comparison of two attacks on the same records (is Leaky's CI above the strongest baseline's?)

def _frame(ids, y, s):
    return pd.DataFrame({"record_id": ids, "is_member": y, "score": s})


def test_paired_difference_hand_example():
    # a separates perfectly (AUROC 1); b ranks every member below every non-member but one tie: with b's scores
    # members 0.2, 0.1 and non-members 0.2, 0.9: pairs won by members: 0.2 -> ½ (tie with 0.2); 0.1 -> 0 => ½ / 4.
    from leakaudit.metrics import paired_auroc_difference
    ids, y = ["r1", "r2", "r3", "r4"], [True, True, False, False]
    a, b = _frame(ids, y, [0.9, 0.8, 0.1, 0.2]), _frame(ids, y, [0.2, 0.1, 0.2, 0.9])
    r = paired_auroc_difference(a, b, n_boot=0, seed=0)
    assert r["delta"] == pytest.approx(1 - 0.5 / 4)
    assert np.isnan(r["delta_lo"]) and np.isnan(r["delta_hi"]) and r["n_boot"] == 0


def test_paired_difference_of_an_attack_with_itself_is_exactly_zero():
    from leakaudit.metrics import paired_auroc_difference
    rng = np.random.default_rng(1)
    ids = np.repeat([f"r{i}" for i in range(30)], 2)
    a = _frame(ids, rng.random(60) < 0.5, rng.normal(size=60))
    r = paired_auroc_difference(a, a.copy(), n_boot=300, seed=4)
    assert (r["delta"], r["delta_lo"], r["delta_hi"], r["frac_boot_le_0"]) == (0.0, 0.0, 0.0, 1.0)


def test_paired_difference_is_antisymmetric_under_one_seed():
    from leakaudit.metrics import paired_auroc_difference
    rng = np.random.default_rng(2)
    ids = np.repeat([f"r{i}" for i in range(25)], 3)
    y = rng.random(75) < 0.5
    a, b = _frame(ids, y, rng.normal(size=75) + y), _frame(ids, y, rng.normal(size=75) + 0.3 * y)
    ab = paired_auroc_difference(a, b, n_boot=400, seed=9)
    ba = paired_auroc_difference(b, a, n_boot=400, seed=9)
    assert ab["delta"] == pytest.approx(-ba["delta"])
    assert (ab["delta_lo"], ab["delta_hi"]) == pytest.approx((-ba["delta_hi"], -ba["delta_lo"]))


def test_paired_difference_matches_a_literal_resampling_of_records():
    # The weighted formula against the definition: draw records with the same generator, repeat each record's
    # rows as often as it was drawn, and compute both AUROCs with sklearn.
    from leakaudit.metrics import _cluster_draws, paired_auroc_difference
    rng = np.random.default_rng(3)
    ids = np.repeat([f"r{i:02d}" for i in range(12)], 2)
    y = np.tile([True, False], 12)
    sa, sb = rng.normal(size=24) + y, rng.normal(size=24)
    a, b = _frame(ids, y, sa), _frame(ids, y, sb)
    counts = _cluster_draws(12, 50, seed=5)
    codes = pd.factorize(pd.Series(ids), sort=True)[0]
    deltas = []
    for c in counts:
        rep = c[codes].astype(int)
        ya = np.repeat(y, rep)
        if ya.all() or not ya.any():
            continue
        deltas.append(roc_auc_score(ya, np.repeat(sa, rep)) - roc_auc_score(ya, np.repeat(sb, rep)))
    r = paired_auroc_difference(a, b, n_boot=50, seed=5)
    assert r["n_boot"] == len(deltas)
    assert (r["delta_lo"], r["delta_hi"]) == pytest.approx((np.percentile(deltas, 2.5), np.percentile(deltas, 97.5)))
    assert r["frac_boot_le_0"] == pytest.approx(np.mean(np.asarray(deltas) <= 0))


def test_paired_ci_is_narrower_than_two_separate_cis_for_correlated_attacks():
    # b is a plus small noise: the records that are hard for a are hard for b, which pairing cancels.
    from leakaudit.metrics import cluster_auroc_ci, paired_auroc_difference
    rng = np.random.default_rng(4)
    ids = np.repeat([f"r{i}" for i in range(40)], 2)
    y = rng.random(80) < 0.5
    sa = rng.normal(size=80) + 0.8 * y
    sb = sa + 0.2 * rng.normal(size=80)
    r = paired_auroc_difference(_frame(ids, y, sa), _frame(ids, y, sb), n_boot=500, seed=0)
    lo_a, hi_a = cluster_auroc_ci(y, sa, ids, n_boot=500, seed=0)
    lo_b, hi_b = cluster_auroc_ci(y, sb, ids, n_boot=500, seed=0)
    assert r["delta_hi"] - r["delta_lo"] < 0.5 * ((hi_a - lo_a) + (hi_b - lo_b)) / 2
