"""The realism card: golden values by hand for the Monte-Carlo KL / entropy, the sample statistics and the
per-domain quality measures; and end to end, over the fake run of tests/fake_run.py with a plan, students' meta.json
and fresh signals (write_fake_realism), that build_report writes realism.json with the training-set counts of the
meta files, the hand-computed KL, entropy and quality, and a "Targets: realism card" section in report.html."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from fake_run import write_fake_realism, write_fake_run
from leakaudit.realism import (DEGENERATE_REPETITION, QUALITY, answer_forms, code_similarity, distinct_fraction,
                               entropy_estimate, extract_final_answer, final_answer_match, kl_estimate, label_match,
                               named_label, parses_as_python, realism_card, sample_stats, sampling_info, seq_rep,
                               summary_line, training_set)
from leakaudit.report import build_report

SECRET = "SECRET-PATIENT-4711"


# ---------------------------------------------------------------- Monte-Carlo estimates
def test_kl_estimate_per_token_and_per_sequence_by_hand():
    lt = [np.array([-0.1, -0.2]), np.array([-1.0])]
    lb = [np.array([-0.5, -0.4]), np.array([-2.0])]
    # differences: [0.4, 0.2] (sum 0.6) and [1.0] (sum 1.0): per token 1.6 / 3, per sequence (0.6 + 1.0) / 2
    kl = kl_estimate(lt, lb)
    assert kl["per_token"] == pytest.approx(0.5333, abs=1e-4)
    assert kl["per_sequence"] == pytest.approx(0.8)
    assert (kl["n_trajectories"], kl["n_tokens"], kl["n_skipped"]) == (2, 3, 0)


def test_kl_estimate_sign_skips_nan_trajectories_and_handles_nothing():
    # target less sure than the base on its own samples: the estimate is negative (a KL cannot be, the MC estimate
    # can); a trajectory the base did not score (NaN) is left out and counted
    kl = kl_estimate([np.array([-2.0]), np.array([-1.0, -1.0])], [np.array([-1.5]), np.array([np.nan, -1.0])])
    assert kl == {"per_token": -0.5, "per_sequence": -0.5, "n_trajectories": 1, "n_tokens": 1, "n_skipped": 1}
    assert kl_estimate([], [])["per_token"] is None
    zero = kl_estimate([np.zeros(0)], [np.zeros(0)])  # one empty trajectory: no token, a 0-sum sequence
    assert zero["per_token"] is None and zero["per_sequence"] == 0.0


def test_entropy_estimate_by_hand():
    h = entropy_estimate([np.array([-0.1, -0.2]), np.array([-1.0])])
    assert h["per_token"] == pytest.approx(1.3 / 3, abs=1e-4)
    assert h["per_sequence"] == pytest.approx(0.65)
    assert h["n_tokens"] == 3


def test_distinct_fraction_and_sample_stats():
    a, b = np.array([1, 2, 3]), np.array([1, 2])
    assert distinct_fraction([a, a.copy(), a.copy(), b]) == 0.5
    assert distinct_fraction([]) is None
    rows = [{"tokens": [a, a.copy()], "texts": ["x", "x"]},          # degenerate: one sample twice
            {"tokens": [b, np.zeros(0, dtype=int)], "texts": ["y", " "]}]
    s = sample_stats(rows, max_new_tokens=3)
    assert s == {"n_records": 2, "n_trajectories": 4, "mean_tokens": 2.0, "zero_length_fraction": 0.25,
                 "at_cap_fraction": 0.5, "empty_fraction": 0.25, "distinct_fraction": 0.75, "seq_rep_4": None}
    assert sample_stats([{"tokens": [a], "texts": None}], None)["empty_fraction"] is None


def test_seq_rep_by_hand():
    """1 - distinct 4-grams / 4-grams: 1234 1234 has 5 4-grams, 4 distinct (1234 twice) -> 0.2; six 5s have
    three 4-grams, all 5555 -> 2/3; under 4 tokens there is no 4-gram; the mean is over trajectories that have one."""
    loop, flat, short = np.array([1, 2, 3, 4, 1, 2, 3, 4]), np.full(6, 5), np.array([7, 8, 9])
    assert seq_rep(loop) == pytest.approx(0.2)
    assert seq_rep(flat) == pytest.approx(2 / 3)
    assert seq_rep(np.arange(10)) == 0.0 and seq_rep(short) is None
    s = sample_stats([{"tokens": [loop, flat], "texts": None}, {"tokens": [short], "texts": None}], None)
    assert s["seq_rep_4"] == pytest.approx((0.2 + 2 / 3) / 2, abs=1e-4)


def test_summary_line_says_when_samples_loop():
    """A domain whose pooled seq-rep-4 reaches DEGENERATE_REPETITION is called a loop; below it, nothing is said."""
    def card(rep):
        lv = {"all": {"kl": None, "entropy": None, "samples": {"distinct_fraction": 0.5, "seq_rep_4": rep}},
              "held_out": None}
        return {"measured": True, "targets": [], "domains": {"medical": {"n_targets": 8, "targets": [], "levels": lv}}}

    assert "samples loop (seq-rep-4 0.800 >= 0.5" in summary_line(card(0.8))
    assert "loop" not in summary_line(card(DEGENERATE_REPETITION - 0.01))
    assert "loop" not in summary_line(card(None))


def test_sampling_info_flags_tempered_sampling():
    ok = sampling_info({"config": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64}})
    assert ok["unbiased"] is True and ok["warning"] is None and ok["max_new_tokens"] == 64
    hot = sampling_info({"config": {"temperature": 1.0, "top_p": 0.9}})
    assert hot["unbiased"] is False and "top_p 0.9" in hot["warning"]
    assert sampling_info(None) is None


def test_training_set_counts_members_population_and_background():
    cands, pop = ["c1", "c2", "c3"], ["p1", "p2"]
    meta = {"record_ids": ["c1", "c3", "p1", "b1", "b2", "b3"], "epochs": 2, "steps": 6}
    t = training_set(meta, cands, pop)
    assert (t["n_records"], t["n_members"], t["n_population"], t["n_background"]) == (6, 2, 1, 3)
    assert (t["epochs"], t["steps"], t["member_fraction"]) == (2, 6, pytest.approx(0.3333))
    assert t["background_source"].startswith("counted")
    recorded = training_set({**meta, "n_background": 5}, cands, pop)
    assert recorded["n_background"] == 5 and recorded["background_source"] == "meta.json n_background"
    assert training_set({"epochs": 1}, cands, pop) is None and training_set(None, cands, pop) is None


# ---------------------------------------------------------------- math
@pytest.mark.parametrize("text, expected", [
    ("Adding them, the answer is 252.", "252"),
    ("so x = -3.5", "-3.5"),                                   # last number, negative decimal
    ("First 3, then \\boxed{\\frac{5}{14}} and 7", "\\frac{5}{14}"),  # boxed wins over a later number
    ("Final answer: C(10, 5), or equivalently 252", "C(10, 5), or equivalently 252"),
    ("The answer is 1,000 apples. Then we stop", "1,000 apples"),
    ("no digits here", None),
])
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


def test_final_answer_match_right_wrong_and_equivalent_forms():
    assert final_answer_match("The answer is 252.", "C(10, 5), or equivalently 252")
    assert final_answer_match("Final answer: C(10, 5)", "C(10, 5), or equivalently 252")
    assert not final_answer_match("The answer is 251.", "C(10, 5), or equivalently 252")   # wrong
    assert final_answer_match("\\boxed{\\dfrac{5}{14}}", "5/14, or approximately 35.7%")
    assert final_answer_match("so the result is $-0.50$", "-1/2")                       # numeric agreement
    assert not final_answer_match("so the result is 0.5", "-1/2")                        # sign matters
    assert final_answer_match("The answer is 1,000 apples.", "1000")                     # leading number, commas
    assert not final_answer_match("the answer is 2^(n-1)", "2")                          # not a leading number
    assert final_answer_match("The answer is No.", "No") and final_answer_match("Final answer: 2^(n-1)", "2^(n-1)")
    assert not final_answer_match("", "0")
    assert answer_forms("n!/(2n), or an equivalent form such as (n-1)!/2") == ["n!/(2n)", "(n-1)!/2"]


# ---------------------------------------------------------------- medical
def test_label_match_whole_word_case_insensitive_last_named():
    labels = ["diabetes", "no diabetes"]
    assert label_match("Conclusion: No Diabetes.", "no diabetes", labels)
    assert not label_match("Conclusion: no diabetes.", "diabetes", labels)   # inside the longer label
    assert label_match("Not no diabetes after all: diabetes.", "diabetes", labels)  # the label named last
    assert not label_match("prediabetes-like", "diabetes", labels)            # no whole word
    thyroid = ["hypothyroidism", "primary hypothyroidism", "hyperthyroidism"]
    assert label_match("Findings fit HYPOTHYROIDISM", "hypothyroidism", thyroid)
    assert not label_match("Findings fit primary hypothyroidism", "hypothyroidism", thyroid)
    assert named_label("nothing relevant", thyroid) is None
    letters = ["A", "B", "C", "D"]
    assert label_match("A 45-year-old man. The answer is B.", "B", letters)    # 'A' here is the article's case
    assert not label_match("a patient; the answer is c", "C", letters)        # one-letter labels keep their case


# ---------------------------------------------------------------- code
def test_code_similarity_by_hand():
    assert code_similarity("abcd", "abxd") == pytest.approx(2 * 3 / 8)
    assert code_similarity("return x", "return y") == pytest.approx(2 * 7 / 16)
    assert code_similarity("", "return 1") == 0.0 and code_similarity("same", "same") == 1.0
    # 420 characters each, 12 of every 14 in common: 6/7; difflib's autojunk would drop the popular characters
    # of a text this long and give 0.01
    assert code_similarity("    y = x + 2\n" * 30, "    x = x + 1\n" * 30) == pytest.approx(6 / 7)


def test_parses_as_python_dedents_unfences_and_never_runs():
    assert parses_as_python("    total = 0\n    for x in xs:\n        total += x\n    return total\n")
    assert parses_as_python("```python\n    return 1\n```\ntrailing prose")
    assert not parses_as_python("    return (1\n")            # cut off by the token cap
    assert not parses_as_python("   ") and not parses_as_python("")
    assert not parses_as_python("    x = 1\n  y = 2\n")        # inconsistent indentation
    # parsing only: a sample that would have side effects is judged on syntax alone and nothing happens
    assert parses_as_python("    raise SystemExit(3)\n")


def test_quality_table_dispatches_by_domain_and_record_fields():
    from leakaudit.data.records import Record

    assert set(QUALITY) == {"math", "medical", "code"}
    m = Record("math", "q", "steps. Final answer: 7", answer="7")
    assert QUALITY["math"].applies(m) and not QUALITY["math"].applies(Record("math", "q", "p"))
    assert QUALITY["math"].score("answer is 7", m, None) == {"final_answer_match": 1.0}
    c = Record("code", "q", "    return 1\n")
    assert QUALITY["code"].score("    return 1\n", c, None) == {"similarity": 1.0, "parses": 1.0}
    med = [Record("medical", f"q{i}", f"p{i}", answer=a, source="medical/diabetes")
           for i, a in enumerate(["diabetes", "no diabetes", "diabetes"])]
    ctx = QUALITY["medical"].context(med)
    assert ctx == {"medical/diabetes": ["diabetes", "no diabetes"]}
    assert QUALITY["medical"].score("Conclusion: no diabetes.", med[0], ctx) == {"label_match": 0.0}


# ---------------------------------------------------------------- end to end over a fake finished run
@pytest.fixture(scope="module")
def built(tmp_path_factory, tokenizer):
    root = write_fake_realism(write_fake_run(tmp_path_factory.mktemp("realism") / "run", secret=SECRET), tokenizer)
    build_report(root, n_boot=50, seed=0, n_perm=0)
    return root


def _targets(root):
    return {t["target"]: t for t in json.loads((root / "realism.json").read_text())["targets"]}


def test_realism_json_training_sets_come_from_meta(built):
    t = _targets(built)
    assert list(t) == ["code-0", "code-1", "math-0", "math-1", "null-math"]
    assert t["null-math"]["null_check"] and t["null-math"]["label_source"] == "math-0"
    m0 = t["math-0"]["training"]
    assert (m0["n_records"], m0["n_members"], m0["n_population"], m0["n_background"], m0["epochs"],
            m0["steps"]) == (22, 10, 0, 12, 3, 9)
    assert m0["background_source"] == "meta.json n_background" and m0["member_fraction"] == pytest.approx(0.4545)
    m1 = t["math-1"]["training"]
    assert (m1["n_records"], m1["n_members"], m1["n_background"], m1["epochs"], m1["steps"]) == (22, 10, 12, 2, None)
    assert m1["background_source"].startswith("counted")
    null = t["null-math"]["training"]
    assert (null["n_records"], null["n_members"], null["n_population"], null["n_background"]) == (20, 0, 8, 12)


def test_realism_json_kl_entropy_samples_and_quality_by_hand(built):
    m0 = _targets(built)["math-0"]
    lv = m0["levels"]
    assert m0["sampling"]["unbiased"] and m0["sampling"]["temperature"] == 1.0
    # members: log p_target -0.2, base -1.2 per token; non-members -0.5 and -1.0
    assert lv["members"]["kl"]["per_token"] == pytest.approx(1.0)
    assert lv["non_members"]["kl"]["per_token"] == pytest.approx(0.5)
    assert lv["members"]["entropy"]["per_token"] == pytest.approx(0.2)
    assert lv["held_out"]["entropy"]["per_token"] == pytest.approx(0.5)
    assert 0.5 < lv["all"]["kl"]["per_token"] < 1.0
    s = lv["all"]["samples"]
    # 8 trajectories, one empty; r000's two samples are identical: (1/2 + 1 + 1 + 1) / 4
    assert (s["n_trajectories"], s["zero_length_fraction"], s["empty_fraction"], s["distinct_fraction"]) == (
        8, 0.125, 0.125, 0.875)
    # final answers: r000 2/2, r002 1/2 (members); r001 1/2 (last number 1; boxed 7), r003 0/2 (non-members)
    assert lv["members"]["quality"] == {"final_answer_match": 0.75, "n_records": 2}
    assert lv["held_out"]["quality"] == {"final_answer_match": 0.25, "n_records": 2}
    assert lv["all"]["quality"]["final_answer_match"] == 0.5


def test_realism_json_null_target_code_target_and_partial_runs(built):
    t = _targets(built)
    null = t["null-math"]
    assert null["sampling"]["unbiased"] is False and "temperature 0.7" in null["sampling"]["warning"]
    assert null["levels"]["all"]["kl"]["per_token"] == 0.0
    assert null["levels"]["held_out"]["quality"]["n_records"] == 2  # trained on no candidate: every one held out
    code = t["code-0"]["levels"]
    assert code["all"]["kl"] is None and any("logp__base" in n for n in t["code-0"]["notes"])
    assert code["members"]["quality"] == {"similarity": 1.0, "parses": 0.0, "n_records": 1}  # the body itself
    assert code["held_out"]["quality"]["parses"] == 1.0
    assert code["held_out"]["quality"]["similarity"] == pytest.approx(
        code_similarity("    return 1\n", f"Solution 1 by {SECRET}"), abs=1e-4)
    for name in ("math-1", "code-1"):  # no fresh signals: nulls and a note, no crash
        assert all(v is None for v in t[name]["levels"].values()) and t[name]["sampling"] is None
        assert any("no fresh trajectories" in n for n in t[name]["notes"])


def test_realism_json_pools_real_targets_per_domain_and_holds_no_text(built):
    card = json.loads((built / "realism.json").read_text())
    assert card["domains"]["math"]["targets"] == ["math-0"]           # the null target is not pooled
    assert card["domains"]["math"]["levels"]["held_out"]["quality"]["final_answer_match"] == 0.25
    assert "not available" in card["base_quality"]
    assert SECRET not in (built / "realism.json").read_text()
    line = summary_line(card)
    assert "math (1 target): trained on 22 records x 3 passes, KL(target||base) " in line
    assert "held-out final_answer_match 0.250" in line and "1 target(s) sampled at temperature/top_p != 1" in line
    # an audit's target was trained elsewhere: no training set in its card, said in words (it printed "? records")
    given = json.loads(json.dumps(card))
    for t in given["targets"]:
        t["training"] = None
    assert "math (1 target): training not recorded here (a given target), KL(target||base) " in summary_line(given)


def test_report_html_and_metrics_json_carry_the_card(built):
    page = (built / "report.html").read_text()
    start = page.index('<section id="realism">')
    sec = page[start:page.index("</section>", start)]
    assert "<h2>Targets: realism card</h2>" in sec
    for cell in ("<td>math-0</td>", "<td>null-math</td>", "<td>pooled (1 real targets)</td>", "<td>22</td>",
                 "<td>0.455</td>", "<td>1.000</td>", "<td>0.500</td>", "<td>0.250</td>", "<td>0.750</td>"):
        assert cell in sec, cell
    assert "<th>KL(t||base) /token</th>" in sec and "<th>quality held-out</th>" in sec and "&lt;NA&gt;" not in sec
    assert "null-math: sampled at temperature 0.7" in sec and "code-1: no fresh trajectories" in sec
    meta = json.loads((built / "metrics.json").read_text())["realism"]
    assert meta["measured"] and meta["file"] == "realism.json"
    rows = {r["target"]: r for r in meta["rows"] if not r["target"].startswith("pooled")}
    assert (rows["math-0"]["trained"], rows["math-0"]["members"], rows["math-0"]["kl_members"]) == (22, 10, 1.0)


def test_a_target_without_meta_or_records_still_gets_a_card(built, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(built, root)
    (root / "models" / "math-0" / "meta.json").unlink()
    card = realism_card(root)
    m0 = next(t for t in card["targets"] if t["target"] == "math-0")
    assert m0["training"] is None and any("meta.json" in n for n in m0["notes"])
    assert m0["levels"]["held_out"]["quality"]["final_answer_match"] == 0.25  # held out = non-members then
    (root / "models" / "null-math" / "meta.json").unlink()
    null = next(t for t in realism_card(root)["targets"] if t["target"] == "null-math")
    assert null["levels"]["held_out"]["quality"]["n_records"] == 2  # without meta: every candidate of a null
    (root / "records.jsonl").unlink()
    m0 = next(t for t in realism_card(root)["targets"] if t["target"] == "math-0")
    assert m0["levels"]["all"]["quality"] is None and m0["levels"]["all"]["kl"]["per_token"] is not None


def test_a_run_without_a_plan_reports_not_measured(tmp_path):
    root = write_fake_run(tmp_path / "plain")
    build_report(root, n_boot=20, seed=0, n_perm=0)
    card = json.loads((root / "realism.json").read_text())
    assert card["measured"] is False and "no membership plan" in card["reason"]
    assert "Not measured: no membership plan" in (root / "report.html").read_text()
    assert json.loads((root / "metrics.json").read_text())["realism"]["rows"] == []
