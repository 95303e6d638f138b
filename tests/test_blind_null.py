"""The blind text baseline's permutation null (leakaudit.metrics.permutation_null, leakaudit.report.blind_null) and
the report's warning when members and non-members differ as text."""

from __future__ import annotations

import html
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from leakaudit.metrics import auroc, distinct_arrangements, n_arrangements, permutation_null
from leakaudit.report import build_report
from leakaudit.report.blind_null import (BLIND_NULL_PERMUTATIONS, WARNING_TEXT, blind_text_null, blind_text_verdict,
                                         read_blind_null)

SCORES = np.arange(1.0, 9.0)  # 8 records, record i has rank i + 1


def _members(*ranks: int) -> np.ndarray:
    y = np.zeros(8, dtype=int)
    y[[r - 1 for r in ranks]] = 1
    return y


def _fixed_score_test(y: np.ndarray, **kw):
    return permutation_null(lambda a: [auroc(a[0].astype(bool), SCORES)], [y], [auroc(y.astype(bool), SCORES)], **kw)


# ---- golden values by hand -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ranks, auc, n_ge", [
    # members at ranks {8,7,6,4}: 15 of the 16 member/non-member pairs are ordered (4 < 5), AUROC 15/16.
    # Of the C(8,4) = 70 member sets only {5,6,7,8} (rank sum 26) and {4,6,7,8} (25) reach rank sum 25.
    ((8, 7, 6, 4), 15 / 16, 2),
    # {8,7,5,3}: rank sum 23, U = 23 - 10 = 13, AUROC 13/16. Sets with rank sum >= 23: 26: {5678}; 25: {4678};
    # 24: {3678}, {4578}; 23: {2678}, {3578}, {4568}: 7 of 70.
    ((8, 7, 5, 3), 13 / 16, 7),
    # {1,2,3,4}: AUROC 0, every one of the 70 sets is at or above it
    ((1, 2, 3, 4), 0.0, 70),
])
def test_exact_p_value_matches_the_hand_count(ranks, auc, n_ge):
    y = _members(*ranks)
    res = _fixed_score_test(y, n_perm=0, seed=0, exact=True)
    assert res.observed[0] == pytest.approx(auc)
    assert res.exact and res.n == math.comb(8, 4) == 70
    assert res.p_value[0] == pytest.approx(n_ge / 70)
    assert res.null.mean() == pytest.approx(0.5)  # AUROC and 1 - AUROC are equally likely


def test_exact_mode_agrees_with_scipy_permutation_test():
    y = _members(8, 7, 5, 3).astype(bool)
    ref = stats.permutation_test((SCORES[y], SCORES[~y]), lambda a, b, axis: _auc(a, b, axis),
                                 permutation_type="independent", alternative="greater", n_resamples=np.inf,
                                 vectorized=True)
    ours = _fixed_score_test(y.astype(int), n_perm=0, seed=0, exact=True)
    assert ours.p_value[0] == pytest.approx(ref.pvalue) == pytest.approx(0.1)
    assert sorted(ours.null[:, 0]) == pytest.approx(sorted(ref.null_distribution))


def _auc(a, b, axis):
    from leakaudit.metrics import _auc_statistic

    return _auc_statistic(a, b, axis=axis)


def test_sampled_estimator_converges_to_the_exact_p_value_and_is_seeded():
    y = _members(8, 7, 5, 3)
    res = _fixed_score_test(y, n_perm=4000, seed=3, exact=False)  # auto would enumerate the 70
    assert not res.exact and res.n == 4000 and res.seed == 3
    assert abs(res.p_value[0] - 0.1) < 0.015  # sd of the estimate ~0.005
    again = _fixed_score_test(y, n_perm=4000, seed=3, exact=False)
    np.testing.assert_array_equal(again.null, res.null)
    assert not np.array_equal(_fixed_score_test(y, n_perm=4000, seed=4, exact=False).null, res.null)
    # sampled p-values carry the +1 (Phipson & Smyth): never 0
    assert _fixed_score_test(_members(5, 6, 7, 8), n_perm=50, seed=0).p_value[0] == pytest.approx(1 / 51)


def test_auto_mode_enumerates_only_when_that_is_no_more_work():
    y = _members(8, 7, 5, 3)
    assert _fixed_score_test(y, n_perm=70, seed=0).exact
    assert not _fixed_score_test(y, n_perm=69, seed=0).exact


def test_distinct_arrangements_of_a_multiset():
    codes = np.array([2, 0, 1, 0])
    seen = [tuple(a) for a in distinct_arrangements(codes)]
    assert len(seen) == len(set(seen)) == n_arrangements(codes) == 4 * 3 * 2 * 1 // 2
    assert seen == sorted(seen) and all(sorted(s) == [0, 0, 1, 2] for s in seen)
    assert n_arrangements(np.arange(5)) == 120 and n_arrangements(np.zeros(6)) == 1


def test_pooled_statistic_over_two_groups_counts_their_product():
    a, b = np.array([0, 0, 1, 1]), np.array([0, 1, 1])
    res = permutation_null(lambda arr: [float(arr[0][0] + arr[1][0])], [a, b], [2.0], n_perm=100, seed=0)
    assert res.exact and res.n == 6 * 3
    # first codes: P(a0 = 1) = 1/2, P(b0 = 1) = 2/3 -> P(sum >= 2) = 1/3
    assert res.p_value[0] == pytest.approx(1 / 3)


# ---- the blind text null on run directories -----------------------------------------------------------------
WORDS = ("apple river stone cloud paper light green house table chair music water".split())


def _texts(n: int, y: np.ndarray, separating: bool, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = list(rng.choice(WORDS, size=4))
        if separating:  # two words that decide membership, twice: out-of-fold AUROC 1.0
            words += (["alpha", "beta"] if y[i] else ["gamma", "delta"]) * 2
        out.append(f"def f{i}(): " + " ".join(words))
    return out


def write_blind_run(root, *, separating: bool, n: int = 12, seed: int = 0):
    """A run directory with real blind_text scores for two targets of one domain whose keep-matrix columns are
    complementary (each record IN for exactly one of them), and records.jsonl holding the texts it saw."""
    from attacks import AttackInputs
    from leakaudit.config import AttackSpecConfig
    from leakaudit.scoring import attack_rows

    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    y0 = np.zeros(n, dtype=bool)
    y0[rng.choice(n, n // 2, replace=False)] = True
    ids = [f"code-r{i:02d}" for i in range(n)]
    texts = _texts(n, y0, separating, seed)
    with open(root / "records.jsonl", "w", encoding="utf-8") as f:
        for rid, text in zip(ids, texts):
            f.write(json.dumps({"record_id": rid, "domain": "code", "prompt": "Write f.", "privileged": text,
                                "answer": None, "source": "test", "meta": {}}) + "\n")
    frames = [attack_rows(AttackInputs(record_ids=ids, texts=texts, labels=y), [AttackSpecConfig("blind_text")],
                          target=t, domain="code") for t, y in (("code-s0", y0), ("code-s1", ~y0))]
    pd.concat(frames, ignore_index=True).to_parquet(root / "scores.parquet", index=False)
    (root / "study.yaml").write_text("study: blind\nseed: 0\n")
    return root


@pytest.fixture(scope="module")
def separating_run(tmp_path_factory):
    root = write_blind_run(tmp_path_factory.mktemp("sep") / "run", separating=True)
    build_report(root, n_boot=100, seed=0, n_perm=40)
    return root


@pytest.fixture(scope="module")
def chance_run(tmp_path_factory):
    # seed 3: AUROC 0.31 against a null of mean 0.40 (with seed 0 these random texts reach p = 0.049: a 1-in-20
    # event under no signal, as the test's level says)
    root = write_blind_run(tmp_path_factory.mktemp("chance") / "run", separating=False, seed=3)
    build_report(root, n_boot=100, seed=0, n_perm=40)
    return root


def _domain_row(root):
    null = read_blind_null(root / "blind_text_null.csv")
    return null[null["level"] == "domain"].iloc[0]


def test_separating_texts_raise_the_warning_with_the_null_beside_it(separating_run):
    row = _domain_row(separating_run)
    assert row["status"] == "ok" and row["auroc"] == 1.0 and row["auroc_lo"] > 0.5
    assert row["p_value"] == pytest.approx(1 / 41) and row["n_null"] == 40 and not row["exact"]
    assert row["null_hi"] < 1.0
    meta = json.loads((separating_run / "metrics.json").read_text())["blind_text_null"]
    assert meta["warning"] is True and meta["n_perm"] == 40 and meta["seed"] == 0
    assert WARNING_TEXT in meta["message"] and f"[{row['null_lo']:.3f}, {row['null_hi']:.3f}]" in meta["message"]
    page = (separating_run / "report.html").read_text()
    assert "Warning: members and non-members differ as text" in page and html.escape(WARNING_TEXT) in page
    assert page.index('id="blind-warning"') < page.index('id="headline"')
    assert 'id="blind"' in page


def test_chance_texts_show_the_null_without_a_warning(chance_run):
    row = _domain_row(chance_run)
    assert row["status"] == "ok" and row["p_value"] > 0.05
    assert row["null_lo"] <= row["auroc"] <= row["null_hi"]
    meta = json.loads((chance_run / "metrics.json").read_text())["blind_text_null"]
    assert meta["warning"] is False and WARNING_TEXT not in meta["message"]
    page = (chance_run / "report.html").read_text()
    assert html.escape(WARNING_TEXT) not in page and 'id="blind-warning"' not in page
    assert "Blind text check" in page and f"{row['null_lo']:.3f}" in page


def test_cli_prints_the_warning_under_the_headline(separating_run, chance_run, capsys):
    from leakaudit.cli_summary import print_headline

    print_headline(separating_run)
    assert "WARNING: " + WARNING_TEXT in capsys.readouterr().out
    print_headline(chance_run)
    out = capsys.readouterr().out
    assert "WARNING" not in out and "permutation null 95%" in out


def test_cli_report_takes_the_number_of_permutations(tmp_path, capsys):
    from leakaudit.cli import main

    root = write_blind_run(tmp_path / "run", separating=True)
    assert main(["report", str(root), "--n-boot", "20", "--n-perm", "30"]) == 0
    assert "WARNING: " in capsys.readouterr().out
    assert set(read_blind_null(root / "blind_text_null.csv")["n_null"]) == {30}


def test_reruns_are_byte_identical_and_the_seed_is_recorded(tmp_path):
    root = write_blind_run(tmp_path / "run", separating=False)
    build_report(root, n_boot=20, seed=5, n_perm=30)
    first = (root / "blind_text_null.csv").read_bytes()
    build_report(root, n_boot=20, seed=5, n_perm=30)
    assert (root / "blind_text_null.csv").read_bytes() == first
    null = read_blind_null(root / "blind_text_null.csv")
    assert set(null["seed"]) == {5}
    build_report(root, n_boot=20, seed=6, n_perm=30)
    other = read_blind_null(root / "blind_text_null.csv")
    assert not np.allclose(other["null_mean"], null["null_mean"])  # another seed, other relabellings
    np.testing.assert_array_equal(other["auroc"], null["auroc"])


def test_relabellings_keep_the_design(tmp_path, monkeypatch):
    """One permutation of the records relabels both targets: every label vector the refit sees keeps the member
    count, and the second target's labels stay the complement of the first's (each record IN for one of two)."""
    import attacks

    root = write_blind_run(tmp_path / "run", separating=False)
    from leakaudit.report.load import load_run, read_records_texts

    run = load_run(root)
    seen: list[tuple[str, tuple]] = []
    real = attacks.run_attack

    def spy(name, inputs, params=None):
        seen.append((inputs.record_ids[0], tuple(np.asarray(inputs.labels, dtype=bool))))
        return real(name, inputs, params)

    monkeypatch.setattr(attacks, "run_attack", spy)
    null = blind_text_null(run.labelled, read_records_texts(root), n_perm=25, seed=1)
    assert set(null["permutation"]) == {"records within domain, all its targets at once"}
    assert len(seen) == 2 * 26  # the real labels of both targets once, then 2 per relabelling (none repeated here)
    assert all(sum(y) == 6 for _, y in seen)
    pairs = list(zip(seen[0::2], seen[1::2]))
    assert all(tuple(not v for v in a[1]) == b[1] for a, b in pairs)


def test_null_target_rows_are_left_out_and_levels_match_metrics(separating_run):
    null = read_blind_null(separating_run / "blind_text_null.csv")
    assert list(zip(null["level"], null["target"])) == [("target", "code-s0"), ("target", "code-s1"),
                                                       ("domain", "*"), ("all", "*")]
    metrics = pd.read_csv(separating_run / "metrics.csv")
    m = metrics[metrics["attack"] == "blind_text"].set_index(["level", "target"])["auroc"]
    for _, r in null.iterrows():
        assert r["auroc"] == pytest.approx(m[(r["level"], r["target"])])


def test_without_records_or_with_other_scores_the_ci_rule_applies(tmp_path):
    root = write_blind_run(tmp_path / "run", separating=True)
    (root / "records.jsonl").unlink()
    build_report(root, n_boot=100, seed=0, n_perm=20)
    row = _domain_row(root)
    assert row["status"].startswith("not computed: no records.jsonl") and np.isnan(row["p_value"])
    meta = json.loads((root / "metrics.json").read_text())["blind_text_null"]
    assert meta["warning"] is True and "CI rule" in meta["message"]

    root = write_blind_run(tmp_path / "run2", separating=True)
    scores = pd.read_parquet(root / "scores.parquet")
    scores.assign(score=scores["score"] * 0.5).to_parquet(root / "scores.parquet")  # same ranks, not its scores
    build_report(root, n_boot=100, seed=0, n_perm=20)
    assert "does not reproduce the stored scores" in _domain_row(root)["status"]


def _verdict_rows(*domains):
    return pd.DataFrame([{"label": "blind_text", "level": "domain", "domain": d, "target": "*", "auroc": a,
                          "auroc_lo": lo, "auroc_hi": hi, "null_mean": 0.38, "null_lo": 0.2, "null_hi": 0.6,
                          "p_value": p, "n_null": 200, "exact": False, "seed": 0, "status": st}
                         for d, a, lo, hi, p, st in domains])


def test_verdict_rule_is_the_permutation_p_value_with_bonferroni_over_domains():
    ok = "ok"
    assert blind_text_verdict(_verdict_rows(("code", 0.9, 0.8, 1.0, 0.004, ok)))["warning"]
    assert not blind_text_verdict(_verdict_rows(("code", 0.32, 0.2, 0.44, 0.85, ok)))["warning"]
    # the CI alone does not decide when there is a null: CI above 0.5 but p = 0.2 -> no warning, and vice versa
    assert not blind_text_verdict(_verdict_rows(("code", 0.6, 0.52, 0.7, 0.2, ok)))["warning"]
    assert blind_text_verdict(_verdict_rows(("code", 0.6, 0.45, 0.7, 0.01, ok)))["warning"]
    two = _verdict_rows(("code", 0.6, 0.45, 0.7, 0.04, ok), ("math", 0.4, 0.3, 0.5, 0.5, ok))
    assert not blind_text_verdict(two)["warning"]  # 0.04 >= 0.05 / 2
    two.loc[0, "p_value"] = 0.02
    v = blind_text_verdict(two)
    assert v["warning"] and v["flagged"] == ["code (blind_text)"] and "0.025" in v["message"]
    assert not blind_text_verdict(pd.DataFrame())["warning"]


def test_report_stage_hashes_the_null_file(tmp_path):
    from leakaudit.config import load_config
    from leakaudit.study import Study

    study = Study(load_config(preset="tiny", overrides=[f"out_root={tmp_path}"]))
    assert study.run.blind_text_null in study.stage_outputs("report")
    assert study.run.blind_text_null.name == "blind_text_null.csv"


def test_the_commands_default_is_the_report_count_and_the_study_stage_keeps_its_own(tmp_path):
    """`leakaudit report` leaves --n-perm unset: build_report then takes report_permutations of the run's domains
    (fewer relabellings, so the command finishes in under a minute); a study's report stage keeps
    BLIND_NULL_PERMUTATIONS, build_report's own default."""
    import inspect

    from fake_run import write_fake_run
    from leakaudit.cli import report
    from leakaudit.report.blind_null import report_permutations

    assert inspect.signature(report).parameters["n_perm"].default.default is None
    assert inspect.signature(build_report).parameters["n_perm"].default == BLIND_NULL_PERMUTATIONS
    root = write_fake_run(tmp_path / "run")
    build_report(root, n_boot=20, n_perm=None)
    meta = json.loads((root / "metrics.json").read_text())
    assert meta["blind_text_null"]["n_perm"] == report_permutations(2)  # the fake run's two domains
