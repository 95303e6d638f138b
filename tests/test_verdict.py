"""The audit's verdict (leakaudit.verdict): golden values computed by hand, and its error rates checked on synthetic
scores (uniform global p-values and FDR at or below its level under a null; power on planted members)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from leakaudit.errors import ConfigError
from leakaudit.verdict import (audit_verdict, conformal_p_values, detectable_auroc, epsilon_lower_bound, flag,
                               global_test, level_warnings, null_size_for, smallest_p)


# ---- golden values -------------------------------------------------------------------------------------------------
def test_conformal_p_values_by_hand():
    null = [0.1, 0.2, 0.3, 0.4]
    cand = [0.35, 0.05, 0.4, 0.5, np.nan]
    # 0.35: one null >= it -> 2/5; 0.05: all four -> 5/5; 0.4: a tie counts against the candidate -> 2/5;
    # 0.5: none -> 1/5 (the smallest possible); NaN is the lowest score -> 5/5
    assert conformal_p_values(cand, null).tolist() == pytest.approx([0.4, 1.0, 0.4, 0.2, 1.0])
    assert smallest_p(4) == pytest.approx(0.2) and smallest_p(99) == pytest.approx(0.01)
    assert null_size_for(0.01) == 99 and null_size_for(0.1) == 9 and null_size_for(0.05) == 19
    assert null_size_for(0.003) == 333  # 1/334 <= 0.003 < 1/333


def test_benjamini_hochberg_list_by_hand_is_step_up():
    # m = 4, q = 0.1: thresholds k q / m = 0.025, 0.05, 0.075, 0.1. Sorted p: 0.03 (> 0.025), 0.045 (<= 0.05),
    # 0.05 (<= 0.075), 0.2 (> 0.1): the largest k passing is 3, so 0.03 is flagged although it fails its own step
    p = [0.03, 0.045, 0.2, 0.05]
    assert flag(p, fdr=0.1).tolist() == [True, True, False, True]
    # q = 0.05: thresholds 0.0125, 0.025, 0.0375, 0.05; no sorted p passes its step -> nothing
    assert flag(p, fdr=0.05).tolist() == [False] * 4
    # per-candidate FPR: a plain threshold
    assert flag(p, fdr=None, fpr=0.045).tolist() == [True, True, False, False]
    with pytest.raises(ConfigError):
        flag(p, fdr=0.1, fpr=0.1)
    with pytest.raises(ConfigError, match="--fdr"):
        flag(p, fdr=1.5)


def test_global_test_by_hand():
    # U = pairs (candidate > null): 3 beats {0, 1, 2}: 3; 4 beats all four; 5 beats all four -> 11 of 12
    # exact one-sided p: of the C(7, 3) = 35 equally likely rank sets, U >= 11 for {7, 6, 5} and {7, 6, 4}: 2/35
    g = global_test([3, 4, 5], [1, 2, 3.5, 0], n_boot=200, seed=0)
    assert g["u"] == 11 and g["auroc"] == pytest.approx(11 / 12)
    assert g["p_value"] == pytest.approx(2 / 35)
    assert g["n_candidates"] == 3 and g["n_null"] == 4
    assert g["auroc_lo"] <= g["auroc"] <= g["auroc_hi"] <= 1
    # NaN is the lowest score: a NaN candidate loses to every null record
    g = global_test([np.nan, 10.0], [1.0, 2.0], n_boot=0)
    assert g["auroc"] == pytest.approx(2 / 4) and math.isnan(g["auroc_lo"])


def test_epsilon_lower_bound_by_hand():
    # 9 of 10 members flagged, 0 of 10 non-members. Clopper-Pearson upper ends (two-sided 95%):
    # FPR: 0 of 10 -> 1 - 0.025**(1/10); FNR: 1 of 10 -> the 0.975 quantile of Beta(2, 9)
    fpr_hi = 1 - 0.025 ** (1 / 10)
    fnr_hi = stats.beta.ppf(0.975, 2, 9)
    assert fpr_hi == pytest.approx(0.30850, abs=1e-5) and fnr_hi == pytest.approx(0.44502, abs=1e-5)
    want = max(math.log((1 - fpr_hi) / fnr_hi), math.log((1 - fnr_hi) / fpr_hi))  # = 0.5872
    e = epsilon_lower_bound(tp=9, fn=1, fp=0, tn=10)
    assert e["fpr_hi"] == pytest.approx(fpr_hi) and e["fnr_hi"] == pytest.approx(fnr_hi)
    assert e["epsilon_lb"] == pytest.approx(want) and e["epsilon_lb"] == pytest.approx(0.5872, abs=1e-4)
    assert (e["tpr"], e["fpr"]) == (0.9, 0.0)
    # delta enters both numerators
    d = epsilon_lower_bound(tp=9, fn=1, fp=0, tn=10, delta=0.1)
    assert d["epsilon_lb"] == pytest.approx(math.log((0.9 - fnr_hi) / fpr_hi))
    # a chance-level rule bounds nothing; one class missing: NaN
    assert epsilon_lower_bound(tp=5, fn=5, fp=5, tn=5)["epsilon_lb"] == 0.0
    assert math.isnan(epsilon_lower_bound(tp=3, fn=0, fp=0, tn=0)["epsilon_lb"])


def test_level_warnings_say_when_the_null_sample_is_too_small():
    # 16 null records cannot reach 1%: the smallest p-value is 1/17
    w = level_warnings(16, 10, fpr=0.01)
    assert len(w) == 1 and "0.0588" in w[0] and "99 records are needed" in w[0]
    w = level_warnings(16, 10, fdr=0.01)
    assert len(w) == 1 and "no candidate can be flagged" in w[0]
    # 19 records reach 0.05 for a list, but a single candidate among 10 needs p <= 0.005: 199 records
    w = level_warnings(19, 10, fdr=0.05)
    assert len(w) == 1 and "only together with others" in w[0] and "199 null records" in w[0]
    assert level_warnings(199, 10, fdr=0.05) == [] and level_warnings(99, 1, fpr=0.01) == []


def test_detectable_auroc_shrinks_with_the_samples():
    # by hand: sd = sqrt((10 + 20 + 1) / (12 * 10 * 20)) = 0.11365; (1.6449 + 0.8416) * sd = 0.2826
    assert detectable_auroc(10, 20) == pytest.approx(0.5 + 2.4865 * math.sqrt(31 / 2400), abs=1e-4)
    assert detectable_auroc(100, 200) < detectable_auroc(10, 20) < 1


def test_audit_verdict_words_and_keys():
    rng = np.random.default_rng(0)
    null = rng.normal(size=99)
    cand = np.r_[rng.normal(size=10) + 4.0, rng.normal(size=10)]
    ids = [f"c{i}" for i in range(20)]
    labels = np.r_[np.ones(10, bool), np.zeros(10, bool)]
    v = audit_verdict(ids, {"leaky": (cand, null), "loss": (rng.normal(size=20), null)}, labels=labels,
                      blind=(rng.normal(size=20), rng.normal(size=99)), null_source="split", n_boot=200)
    assert v["evidence"] and v["valid"] and v["primary_global"]["p_value"] < 1e-3
    assert v["headline"].startswith("Candidates score higher than known non-members: AUROC")
    assert f"{len(v['flagged_ids'])} of 20 candidates flagged at FDR 0.1" in v["headline"]
    assert set(v["flagged_ids"]) <= {f"c{i}" for i in range(10)} and len(v["flagged_ids"]) >= 8
    assert v["p_values"][0] == pytest.approx(conformal_p_values(cand, null)[0])
    assert v["smallest_p"] == pytest.approx(0.01)
    assert len(v["warnings"]) == 1 and "flagging a single one among 20 needs p <= 0.005" in v["warnings"][0]
    assert v["epsilon"]["epsilon_lb"] > 0 and set(v["global"]) == {"leaky", "loss"}
    # no signal: says so and what the audit could have detected
    half = np.r_[-np.ones(50), np.ones(49)]  # candidates at 0 beat 50 of 99 null records: AUROC 50/99
    v = audit_verdict(ids, {"leaky": (np.zeros(20), half)}, n_boot=0)
    assert not v["evidence"] and v["primary_global"]["auroc"] == pytest.approx(50 / 99)
    assert v["headline"].startswith("No evidence that any candidate was used (p = ")
    assert f"detects an AUROC of {detectable_auroc(20, 99):.2f} or more with 80% power" in v["headline"]
    v = audit_verdict(ids[:2], {"leaky": (np.zeros(2), np.ones(2))}, n_boot=0)
    assert "too small to detect even a perfect separation" in v["headline"]
    # candidates that differ from the null sample as text: not valid, whatever Leaky says
    v = audit_verdict(ids, {"leaky": (cand, null)}, blind=(rng.normal(size=20) + 3, rng.normal(size=99)),
                      n_boot=200)
    assert not v["valid"] and v["headline"].startswith("The test is not valid for these files")
    with pytest.raises(ConfigError, match="primary attack 'leaky'"):
        audit_verdict(ids, {"loss": (cand, null)})


# ---- validity under a null, power under planted members ----------------------------------------------------------
def test_global_p_values_are_uniform_under_the_null():
    """Candidates exchangeable with the null sample: the one-sided p-value is uniform (KS), and the test rejects at
    5% about 5% of the time."""
    rng = np.random.default_rng(1)
    ps = np.array([global_test(rng.normal(size=24), rng.normal(size=60), n_boot=0)["p_value"] for _ in range(600)])
    assert stats.kstest(ps, "uniform").pvalue > 0.01
    assert abs((ps < 0.05).mean() - 0.05) < 0.03


def test_global_p_values_are_not_uniform_with_a_shift():
    """The KS check above can fail: with a small planted shift the p-values pile up near 0."""
    rng = np.random.default_rng(2)
    ps = np.array([global_test(rng.normal(size=24) + 0.5, rng.normal(size=60), n_boot=0)["p_value"]
                   for _ in range(200)])
    assert stats.kstest(ps, "uniform").pvalue < 1e-6


def test_conformal_p_values_are_valid_and_the_flagged_list_holds_its_fdr():
    """A non-member candidate's p-value: P(p <= a) <= a. The BH list's false discovery proportion, averaged over
    draws with and without members, stays at or below its level; under the full null that is the chance of flagging
    anything at all."""
    rng = np.random.default_rng(3)
    q, n_null, reps = 0.1, 99, 400
    single, fdp_null, fdp_mixed, any_null = [], [], [], []
    for _ in range(reps):
        null = rng.normal(size=n_null)
        cand = rng.normal(size=30)
        p = conformal_p_values(cand, null)
        single.append(p[0])
        f = flag(p, fdr=q)
        any_null.append(f.any())
        fdp_null.append(float(f.any()))  # every flag is false
        members = np.r_[np.ones(10, bool), np.zeros(20, bool)]
        mixed = np.where(members, rng.normal(size=30) + 3.0, cand)
        fm = flag(conformal_p_values(mixed, null), fdr=q)
        fdp_mixed.append((fm & ~members).sum() / max(1, fm.sum()))
    single = np.array(single)
    for a in (0.05, 0.1, 0.2):
        assert (single <= a).mean() <= a + 3 * math.sqrt(a * (1 - a) / reps)
    se = 3 * math.sqrt(q * (1 - q) / reps)
    assert np.mean(fdp_null) <= q + se and np.mean(fdp_mixed) <= q + se
    # BH over 20 true nulls of 30 controls at q * 20 / 30; the average is well above zero (not vacuous)
    assert np.mean(fdp_mixed) > 0.01


def test_planted_members_are_found():
    """Positive control: 16 members of 40 candidates score higher; the global test rejects and the flagged list
    holds members (few non-members)."""
    rng = np.random.default_rng(0)
    members = np.r_[np.ones(16, bool), np.zeros(24, bool)]
    cand = rng.normal(size=40) + np.where(members, 3.0, 0.0)
    null = rng.normal(size=199)
    ids = [f"r{i}" for i in range(40)]
    v = audit_verdict(ids, {"leaky": (cand, null)}, labels=members, n_boot=200)
    assert v["primary_global"]["p_value"] < 1e-3 and v["evidence"]
    flagged = np.array(v["flagged"])
    assert (flagged & members).sum() >= 10 and (flagged & ~members).sum() <= 2
    assert v["epsilon"]["tpr"] >= 10 / 16 and v["epsilon"]["epsilon_lb"] > 0.5


def test_verdict_box_states_the_headline_warnings_and_tests():
    import html

    from leakaudit.report.verdict_section import verdict_section

    rng = np.random.default_rng(5)
    ids = [f"<c{i}>" for i in range(6)]  # escaped in the page
    v = audit_verdict(ids, {"leaky": (rng.normal(size=6) + 5, rng.normal(size=9)), "loss": (rng.normal(size=6),
                                                                                           rng.normal(size=9))},
                      blind=(rng.normal(size=6), rng.normal(size=9)), n_boot=100)
    box = verdict_section(v)
    assert box.startswith('<section id="verdict">') and "&lt;c0&gt;" in box and "<c0>" not in box
    assert v["headline"].split(":")[0] in box and "leaky (primary)" in box and "blind text (exchangeability" in box
    assert v["warnings"] and all(html.escape(w) in box for w in v["warnings"])  # 9 null records: 0.1 / 6 not reached
    assert verdict_section(None) == ""


# ---- a study's verdict ---------------------------------------------------------------------------------------------
def _study_scores(shift: float, *, blind_shift: float = 0.0, seed: int = 0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for target, null_check in (("math-s0", False), ("math-s1", False), ("math-null", True)):
        y = np.r_[np.ones(20, bool), np.zeros(20, bool)]
        for attack, d in (("leaky@offline", 0.0 if null_check else shift), ("leaky", 0.0), ("blind_text", blind_shift)):
            s = rng.normal(size=40) + np.where(y, d, 0.0)
            rows += [{"record_id": f"r{i}", "target": target, "domain": "math", "attack": attack, "score": s[i],
                      "is_member": float(y[i]), "null_check": null_check} for i in range(40)]
    return pd.DataFrame(rows)


def test_study_verdict_by_target_with_bonferroni_and_the_null_target():
    from leakaudit.verdict import study_verdict

    v = study_verdict(_study_scores(2.0), n_boot=0)
    assert v["primary"] == "leaky@offline" and v["n_targets"] == 2 and [t["target"] for t in v["null_targets"]] == \
        ["math-null"]
    # Bonferroni by hand: 2 real targets -> twice the smaller p-value
    assert v["family_p"] == pytest.approx(2 * min(t["p_value"] for t in v["targets"]))
    assert v["evidence"] and v["n_rejected"] == 2 and v["valid"]
    assert v["headline"].startswith("The targets leak: 2 of 2 targets' members score higher")
    assert "Null targets (trained on no candidate): math-null p = " in v["headline"]
    v = study_verdict(_study_scores(0.0, seed=1), n_boot=0)
    assert not v["evidence"] and v["headline"].startswith("No evidence that the targets leak")
    v = study_verdict(_study_scores(2.0, blind_shift=3.0), n_boot=100)
    assert not v["valid"] and v["headline"].startswith("The test is not valid for this study")
    assert study_verdict(_study_scores(1.0).query("attack == 'blind_text'")) is None


def test_a_study_report_opens_with_its_verdict(tmp_path):
    from fake_run import write_fake_run
    from leakaudit.report import build_report

    root = write_fake_run(tmp_path / "study")
    html = build_report(root, n_boot=20, n_perm=0).read_text()
    assert html.index("<section") == html.index('<section id="verdict">')
    assert "Verdict: do the targets leak?" in html


def test_study_epsilon_is_the_largest_bound_over_the_fpr_levels_golden():
    import pandas as pd

    from leakaudit.verdict import EPSILON_FPRS, epsilon_lower_bound, study_epsilon

    # one target, members 10..29 above non-members 0..19 interleaved: robust z keeps the order; at each level the
    # threshold is the non-members' (1 - level) quantile ('higher'), flagged = score above it
    y = np.r_[np.ones(20, bool), np.zeros(20, bool)]
    s = np.r_[np.arange(10, 30), np.arange(0, 20)].astype(float)
    rows = pd.DataFrame({"record_id": [f"r{i}" for i in range(40)], "target": "t", "domain": "math",
                         "attack": "leaky@offline", "score": s, "is_member": y.astype(float)})
    got = study_epsilon(rows)
    want = []
    for level in EPSILON_FPRS:
        thr = np.quantile(s[~y], 1 - level, method="higher")  # 19 at every level here: no non-member above it
        flag = s > thr
        want.append(epsilon_lower_bound(int((flag & y).sum()), int((~flag & y).sum()), int((flag & ~y).sum()),
                                        int((~flag & ~y).sum()), confidence=1 - 0.05 / len(EPSILON_FPRS)))
    assert got["epsilon_lb"] == pytest.approx(max(w["epsilon_lb"] for w in want)) and got["epsilon_lb"] > 0
    assert got["fpr"] == 0.0 and got["tpr"] == pytest.approx(10 / 20)  # members 20..29 above 19
    # no signal: no bound above 0 (TPR = FPR gives log(1) at best, and the CP bounds only lower it)
    flat = rows.assign(score=np.r_[np.arange(20), np.arange(20)].astype(float))
    assert study_epsilon(flat)["epsilon_lb"] == 0.0


def test_a_study_verdict_carries_its_epsilon():
    from leakaudit.verdict import study_verdict

    v = study_verdict(_study_scores(2.0), n_boot=0)
    assert v["epsilon"]["epsilon_lb"] > 0 and v["epsilon"]["n_members"] == 40  # two real targets, 20 members each


def test_the_study_box_states_the_epsilon_bound():
    from leakaudit.report.verdict_section import study_section
    from leakaudit.verdict import study_verdict

    v = study_verdict(_study_scores(2.0), n_boot=0)
    html = study_section(v)
    assert f"ε ≥ {v['epsilon']['epsilon_lb']:.2f}" in html and "Clopper-Pearson" in html
