"""build_report over the synthetic run directory from tests/fake_run.py."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from fake_run import write_fake_run
from leakaudit.errors import InputError
from leakaudit.report import build_report, candidate_table, load_run, run_metrics
from leakaudit.report.leakmap import _layout

SECRET = "SECRET-PATIENT-4711"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = write_fake_run(tmp_path_factory.mktemp("run") / "study", secret=SECRET)
    return root, build_report(root, n_boot=200, seed=0)


def test_writes_every_file(built):
    root, html_path = built
    assert html_path == root / "report.html"
    for name in ("metrics.json", "metrics.csv", "report.html"):
        assert (root / name).stat().st_size > 0
    pngs = {p.name for p in (root / "plots").glob("*.png")}
    assert pngs == {"auroc_bars.png", "roc_math.png", "roc_code.png", "score_distributions.png",
                    "null_check.png", "leak_map.png"}
    assert all((root / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert not list(root.glob(".*.tmp")) and not (root / "plots.partial").exists()


def test_metrics_files_agree_and_carry_provenance(built):
    root, _ = built
    meta = json.loads((root / "metrics.json").read_text())
    csv = pd.read_csv(root / "metrics.csv")
    assert len(meta["results"]) == len(csv)
    assert (csv["level"] != "target_mean").sum() == 40  # summarise's levels: per target, per domain, overall
    # target_mean: real targets in math, code and all (4 attacks + 1 per-target maximum each); null: math only
    assert csv[csv["level"] == "target_mean"].groupby("null_check").size().to_dict() == {False: 15, True: 5}
    assert meta["config_hash"].startswith("sha256:") and meta["seeds"] == {"bootstrap": 0, "study": 7, "env": 7}
    assert meta["bootstrap"]["n_boot"] == 200 and meta["versions"]["numpy"]
    assert meta["inputs"]["scores.parquet"]["rows"] == 800
    leaky_all = csv[(csv["level"] == "all") & ~csv["null_check"] & (csv["attack"] == "leaky")].iloc[0]
    assert leaky_all["auroc"] > 0.9 and leaky_all["n_neg"] == 80
    assert all(r["straddles_0.5"] for r in meta["null_check"])  # fake null target has no signal
    head = {(r["domain"], r["method"]): r for r in meta["headline"]}
    best = head[("all", "best OUT-only baseline")]
    assert best["attack"] in {"loss", "min_k"} and best["delta_lo"] > 0  # the planted signal: Leaky above
    assert head[("all", "Leaky")]["auroc"] > 0.9 and head[("all", "Leaky")]["n_targets"] == 4
    assert ("all", "best online attack (IN+OUT)") not in head  # the fake has no online attack
    # the study verdict (the report's first box) is in metrics.json too: the planted Leaky signal is evidence
    assert meta["study_verdict"]["primary"] == "leaky" and meta["study_verdict"]["evidence"] is True


def test_html_is_self_contained_with_headline_and_images(built):
    root, html_path = built
    page = html_path.read_text()
    headline = json.loads((root / "metrics.json").read_text())["headline"]
    assert [(h["domain"], h["method"]) for h in headline[:4]] == [
        ("code", "Leaky"), ("code", "best OUT-only baseline"), ("code", "paper: max OUT-only baseline per target"),
        ("code", "blind text (check)")]
    assert "<h2>Headline: mean per-target AUROC</h2>" in page
    for h in headline:  # every headline cell is on the page
        assert f"<td>{h['mean per-target AUROC [95% CI]']}</td>" in page
    assert page.count('src="data:image/png;base64,') == 6
    assert not re.search(r'src="(?!data:)', page)  # nothing loaded from outside the page
    assert "Number of negatives" in page and "Null check passed" in page
    assert "Every attack: mean per-target AUROC" in page
    assert SECRET in page  # not redacted by default: the config shows it


def test_redact_removes_planted_secret(tmp_path):
    root = write_fake_run(tmp_path / "study", secret=SECRET)
    (root / "study.yaml").write_text("study: fake\nseed: 7\n")  # secret only in records and leak map
    lm = json.loads((root / "leak_map.json").read_text())
    (root / "leak_map.json").write_text(json.dumps(dict(lm, prompt=f"Ask {SECRET}")))
    build_report(root, redact=True, n_boot=0)
    for name in ("report.html", "metrics.json", "metrics.csv"):
        text = (root / name).read_text()
        assert SECRET not in text, name
    assert "[redacted]" in (root / "report.html").read_text()
    assert json.loads((root / "metrics.json").read_text())["redacted"] is True


def test_redact_masks_privileged_config_keys(tmp_path):
    root = write_fake_run(tmp_path / "study", secret=SECRET)
    build_report(root, redact=True, n_boot=0)
    assert SECRET not in (root / "report.html").read_text()
    assert json.loads((root / "metrics.json").read_text())["config"]["examples"] == "[redacted]"


def test_missing_scores_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="scores.parquet"):
        build_report(tmp_path)


def test_unlabelled_audit_gets_a_candidate_ranking(tmp_path):
    root = write_fake_run(tmp_path / "audit")
    scores = pd.read_parquet(root / "scores.parquet")
    scores = scores[scores["target"] == "math-0"].assign(is_member=None)
    scores.to_parquet(root / "scores.parquet")
    page = build_report(root, n_boot=0).read_text()
    assert "<h2>Candidates</h2>" in page and "<h2>Headline" not in page
    assert json.loads((root / "metrics.json").read_text())["results"] == []


def test_load_run_and_candidate_table(built):
    root, _ = built
    run = load_run(root)
    assert run.config["seed"] == 7 and run.leak_map["record_id"] == "math-r000"
    assert len(run_metrics(run)) == 40 < len(run.metrics)  # metrics.csv also holds the target_mean rows
    table = candidate_table(run.scores[run.scores["target"] == "math-0"])
    assert len(table) == 40 and {"leaky", "loss", "min_k", "blind_text", "is_member"} <= set(table.columns)
    assert table["leaky"].is_monotonic_decreasing


def test_leak_map_layout_wraps_and_breaks_lines():
    lay = _layout(["abc", "defg", "\n", "hi", "jklmnop"], width=8)
    # abc|defg fill 7 cols; the newline token goes on (0, 7) and ends the line; "hi" starts line 1;
    # "jklmnop" does not fit after "hi" (2 + 7 > 8) and wraps to line 2.
    assert lay == [(0, 0, "abc"), (0, 3, "defg"), (0, 7, "↵"), (1, 0, "hi"), (2, 0, "jklmnop")]


def test_run_headline_reads_the_report_and_else_computes(built, tmp_path):
    from leakaudit.report import run_headline

    root, _ = built
    stored = run_headline(load_run(root), n_boot=7)  # the report's, not recomputed
    meta = json.loads((root / "metrics.json").read_text())
    want = [float("nan") if h["auroc_lo"] is None else h["auroc_lo"] for h in meta["headline"]]
    assert stored["auroc_lo"].astype(float).tolist() == pytest.approx(want, nan_ok=True)
    fresh = write_fake_run(tmp_path / "unbuilt", secret=SECRET)  # no metrics.json: computed now
    computed = run_headline(load_run(fresh), n_boot=50)
    assert computed[["domain", "method", "attack"]].values.tolist() == stored[["domain", "method", "attack"]].values.tolist()



def test_cli_prints_the_mean_per_target_headline_with_paired_differences(built, capsys):
    from leakaudit.cli_summary import print_headline

    root, _ = built
    print_headline(root)
    out = capsys.readouterr().out
    row = next(r for r in json.loads((root / "metrics.json").read_text())["headline"]
               if r["domain"] == "all" and r["method"] == "best OUT-only baseline")
    assert "Mean per-target AUROC [95% CI]; Δ = Leaky − row, paired" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("all") and "best OUT-only baseline" in x)
    assert row["mean per-target AUROC [95% CI]"] in line and f"Δ {row['Δ Leaky − this [95% CI]']}" in line


def test_null_verdict_reads_every_leaky_design():
    from leakaudit.report.build import null_verdict

    nulls = pd.DataFrame({"label": ["leaky", "leaky@offline", "loss"], "straddles_0.5": [True, False, True]})
    # before: only the label 'leaky' was read, so a null leaky@offline at AUROC 1.0 printed "Null check passed"
    assert null_verdict(nulls) == (False, ["leaky", "leaky@offline"])
    assert null_verdict(nulls.assign(**{"straddles_0.5": [True, True, False]})) == (True, ["leaky", "leaky@offline"])
    no_leaky = pd.DataFrame({"label": ["loss", "zlib"], "straddles_0.5": [True, False]})
    assert null_verdict(no_leaky) == (False, ["loss", "zlib"])


def test_default_family_of_an_offline_label_is_its_attack_s():
    from leakaudit.metrics import default_family

    assert default_family("leaky@offline") == default_family("leaky") == "fresh"
    assert default_family("rmia@offline") == default_family("rmia") == "fixed"
    assert default_family("blind_text@offline") == "blind"


def test_roc_figure_draws_the_given_attacks_coloured_by_family():
    from leakaudit.metrics import normalise_scores
    from leakaudit.report.plots import family_colours, roc_figure

    from fake_run import fake_scores

    scores = normalise_scores(fake_scores())
    scores = scores[~scores["null_check"] & (scores["domain"] == "code")]
    fig = roc_figure(scores, title="code", labels=["leaky", "loss", "blind_text"])
    lines = [line for line in fig.axes[0].get_lines() if line.get_linestyle() != "--"]
    assert len(lines) == 3  # the three asked for, not min_k; the dashed diagonal aside
    legend = fig.axes[1].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["leaky", "loss", "blind_text"]
    colours = family_colours(["leaky", "loss", "min_k", "blind_text"],
                             {"leaky": "fresh", "loss": "fixed", "min_k": "fixed", "blind_text": "blind"})
    # one family, one hue: the two fixed-text attacks are shades of orange (red channel above blue)
    assert all(colours[a][0] > colours[a][2] for a in ("loss", "min_k")) and colours["leaky"][2] > colours["leaky"][0]
