"""The published statistic (mean per-target AUROC), its two-level bootstrap, threat models and per-target
normalisation: golden values computed by hand in the comments, and invariants."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fake_run import fake_scores
from leakaudit.metrics import auroc_ci, normalise_scores, normalise_within_target, roc_metrics, summarise, threat_model
from leakaudit.per_target import (PAPER_MAX, PAPER_MAX_ANY, headline_table, mean_target_table, mean_target_tables,
                                  target_matrices, two_level_bootstrap)


def _rows(target: str, attack: str, members: list[float], non_members: list[float], *, params: str = "{}",
          family: str = "fixed", domain: str = "math") -> list[dict]:
    return ([{"record_id": f"{target}-m{i}", "target": target, "domain": domain, "attack": attack, "params": params,
              "family": family, "score": s, "is_member": True} for i, s in enumerate(members)]
            + [{"record_id": f"{target}-n{i}", "target": target, "domain": domain, "attack": attack,
                "params": params, "family": family, "score": s, "is_member": False} for i, s in enumerate(non_members)])


def _frame(rows) -> pd.DataFrame:
    return normalise_scores(pd.DataFrame(rows))


def test_threat_models_are_declared_by_the_attacks():
    assert threat_model("leaky") == "OUT-only" and threat_model("leaky@offline") == "OUT-only"
    assert threat_model("lira_online") == "IN+OUT" and threat_model("lira_offline") == "OUT-only"
    assert threat_model("rmia", json.dumps({"offline": False})) == "IN+OUT"
    assert threat_model("rmia", {"offline": True}) == "OUT-only"
    assert threat_model("blind_text") == "check"
    assert threat_model("not_an_attack") == "unknown"


def test_mean_per_target_auroc_and_the_papers_per_target_maximum_golden():
    # loss on t1: members {3, 1} vs non {2, 0}: pairs won 3>2, 3>0, 1>0 = 3/4; on t2: {1, 0} vs {2, 3}: 0/4.
    # min_k on t1: {0, 1} vs {2, 3}: 0; on t2: {3, 2} vs {1, 0}: 1.
    # means: loss 0.375, min_k 0.5; per-target max: t1 0.75, t2 1.0 -> 0.875 (the best single one is 0.5).
    rows = (_rows("t1", "loss", [3, 1], [2, 0]) + _rows("t2", "loss", [1, 0], [2, 3])
            + _rows("t1", "min_k", [0, 1], [2, 3]) + _rows("t2", "min_k", [3, 2], [1, 0]))
    t = mean_target_table(_frame(rows), n_boot=0, seed=0).set_index("label")
    assert t.loc["loss", "auroc"] == pytest.approx(0.375) and t.loc["min_k", "auroc"] == pytest.approx(0.5)
    assert t.loc[PAPER_MAX, "auroc"] == pytest.approx(0.875) and np.isnan(t.loc[PAPER_MAX, "auroc_lo"])
    assert t.loc["loss", "n_targets"] == 2 and t.loc["loss", "threat_model"] == "OUT-only"
    # per-target AUROC SD (ddof 1) of loss: |0.75 - 0| / sqrt(2)
    assert t.loc["loss", "sd_targets"] == pytest.approx(0.75 / np.sqrt(2))


def test_paired_difference_is_against_leaky_and_zero_with_itself():
    # leaky on t1 {2, 3} vs {0, 1} = 1; t2 {1, 3} vs {0, 2} = 3/4 -> 0.875; loss as above -> 0.375; Δ = 0.5
    rows = (_rows("t1", "leaky", [2, 3], [0, 1], family="fresh") + _rows("t2", "leaky", [1, 3], [0, 2], family="fresh")
            + _rows("t1", "loss", [3, 1], [2, 0]) + _rows("t2", "loss", [1, 0], [2, 3]))
    t = mean_target_table(_frame(rows), n_boot=300, seed=1).set_index("label")
    assert t.loc["leaky", "auroc"] == pytest.approx(0.875)
    assert t.loc["loss", "primary"] == "leaky" and t.loc["loss", "delta"] == pytest.approx(0.5)
    assert np.isnan(t.loc["leaky", "delta"])
    assert t.loc["loss", "delta_lo"] <= 0.5 <= t.loc["loss", "delta_hi"]
    same = mean_target_table(_frame(rows + [dict(r, attack="leaky@offline") for r in rows if r["attack"] == "leaky"]),
                             n_boot=300, seed=1).set_index("label")
    assert same.loc["leaky", "primary"] == "leaky@offline"  # offline references are the primary design
    assert same.loc["leaky", "delta_lo"] == same.loc["leaky", "delta_hi"] == 0.0  # identical scores, same draws


def test_targets_are_resampled_at_the_first_level():
    # t1 separates perfectly (AUROC 1 under any record draw), t2 perfectly backwards (0): a resample of 2 target
    # slots has mean 1 (both t1), 0.5 or 0 with probabilities 1/4, 1/2, 1/4.
    rows = _rows("t1", "loss", [5, 6, 7], [1, 2, 3]) + _rows("t2", "loss", [1, 2, 3], [5, 6, 7])
    df = _frame(rows)
    boot = two_level_bootstrap(target_matrices(df, ["loss"]), n_boot=8000, seed=0)   # [1, B, 2]
    means = boot[0].mean(axis=1)
    freq = [np.mean(means == v) for v in (0.0, 0.5, 1.0)]
    assert freq == pytest.approx([0.25, 0.5, 0.25], abs=0.02)


def test_records_are_resampled_within_a_target_like_the_stratified_bootstrap():
    rng = np.random.default_rng(3)
    members, non = rng.normal(0.8, 1, 30), rng.normal(0, 1, 30)
    df = _frame(_rows("t1", "loss", list(members), list(non)))
    t = mean_target_table(df, n_boot=4000, seed=0).iloc[0]
    y = np.r_[np.ones(30, bool), np.zeros(30, bool)]
    lo, hi = auroc_ci(y, np.r_[members, non], n_boot=4000, seed=5)
    assert t["auroc_lo"] == pytest.approx(lo, abs=0.02) and t["auroc_hi"] == pytest.approx(hi, abs=0.02)
    assert t["auroc_lo"] < t["auroc"] < t["auroc_hi"]


def test_normalisation_removes_a_between_target_offset_golden():
    # Raw pooled: members {10, 11, 1, 2} vs non {8, 9, -1, 0}: 10 and 11 beat all 4 (8 pairs), 1 and 2 beat -1 and
    # 0 (4 pairs) = 12/16. Within each target (median 9.5 / 0.5, MAD 1) the robust z-scores are ±0.337, ±1.012 for
    # both: members {0.337, 1.012} x 2 beat every non-member -> 1.0. Per-target AUROCs are 1 either way.
    rows = _rows("a", "loss", [10, 11], [8, 9]) + _rows("b", "loss", [1, 2], [-1, 0])
    raw = pd.DataFrame(rows)
    assert roc_metrics(raw["is_member"], raw["score"], n_boot=0)["auroc"] == pytest.approx(0.75)
    z = normalise_within_target(_frame(rows))
    assert sorted(z[z["target"] == "a"]["score"].round(3)) == [-1.012, -0.337, 0.337, 1.012]
    m = summarise(raw, n_boot=0).set_index("level")
    assert m.loc["all", "auroc"] == pytest.approx(1.0) and (m.loc["target", "auroc"] == 1.0).all()


def test_normalisation_keeps_nan_lowest_and_constant_targets_finite():
    rows = _rows("a", "loss", [1.0, np.nan], [1.0, 1.0])
    z = normalise_within_target(_frame(rows))
    assert z["score"].isna().sum() == 1 and (z["score"].dropna() == 0.0).all()


def test_headline_compares_leaky_with_the_best_out_only_baseline_and_labels_online_attacks():
    df = fake_scores()
    df = pd.concat([df, df[df["attack"] == "loss"].assign(attack="rmia", params=json.dumps({"offline": False}),
                                                           score=lambda d: d["score"] * 3)])
    n = normalise_scores(df)
    mt = mean_target_tables(n, n_boot=100, seed=0)
    h = headline_table(mt, summarise(df, n_boot=0))
    code = h[h["domain"] == "code"].set_index("method")
    assert code.loc["Leaky", "attack"] == "leaky"
    assert code.loc["best OUT-only baseline", "attack"] in {"loss", "min_k"}
    assert code.loc["best online attack (IN+OUT)", "attack"] == "rmia"
    assert code.loc["best online attack (IN+OUT)", "threat_model"] == "IN+OUT"
    assert code.loc["best OUT-only baseline", "delta_lo"] > 0  # the planted signal: Leaky far above
    assert set(h["domain"]) == {"math", "code", "all"}
    # 40 negatives cannot resolve 1% FPR (α · n_neg < 1): blank rather than the TPR at FPR 0
    assert code.loc["Leaky", "n_neg"] == 40 and np.isnan(code.loc["Leaky", "TPR@1% (normalised pool)"])
    # a baseline chosen on a development run is read as chosen, whatever these labels say
    dev = headline_table(mt, summarise(df, n_boot=0), chosen={"best OUT-only baseline": "blind_text"})
    row = dev[(dev["domain"] == "code") & (dev["method"] == "best OUT-only baseline")].iloc[0]
    assert row["attack"] == "blind_text" and row["chosen_on"] == "development run"
    assert PAPER_MAX_ANY in set(mt["label"])


def test_null_targets_are_summarised_apart():
    mt = mean_target_tables(normalise_scores(fake_scores()), n_boot=0, seed=0)
    null = mt[mt["null_check"]]
    assert set(null["domain"]) == {"math"} and (null["n_targets"] == 1).all()
    assert (mt[~mt["null_check"] & (mt["domain"] == "all")]["n_targets"] == 4).all()
