"""The report's figures: the headline's bars coloured by attack family as the ROC curves are, and at most
plots.MAX_CURVES curves per ROC panel whatever the headline holds."""

from __future__ import annotations

import pandas as pd

from fake_run import fake_scores
from leakaudit.metrics import normalise_scores, summarise
from leakaudit.report import plots
from leakaudit.report.build import roc_labels

FAMILIES = {"leaky": "fresh", "fresh_gap": "fresh", "loss": "fixed", "blind_text": "blind"}


def _headline(methods: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame([{"domain": "code", "method": m, "attack": a, "auroc": 0.6, "auroc_lo": 0.5, "auroc_hi": 0.7}
                         for m, a in methods])


def test_the_bars_take_their_attacks_family_colours():
    headline = _headline([("Leaky", "leaky"), ("best OUT-only baseline", "fresh_gap"), ("best fixed", "loss"),
                          ("paper: max OUT-only baseline per target", "max OUT-only baseline per target"),
                          ("blind text (check)", "blind_text")])
    fig = plots.auroc_bars_figure(headline, FAMILIES)
    colour = {text.get_text(): handle.get_facecolor()[:3]
              for text, handle in zip(fig.axes[0].get_legend().get_texts(), fig.axes[0].get_legend().legend_handles)}
    expected = plots.family_colours(list(headline["method"]),
                                    {m: FAMILIES.get(a, "other") for m, a in zip(headline["method"], headline["attack"])})
    assert colour == {m: tuple(c) for m, c in expected.items()}
    leaky, fresh, fixed = colour["Leaky"], colour["best OUT-only baseline"], colour["best fixed"]
    assert leaky[2] > leaky[0] and fresh[2] > fresh[0] and fixed[0] > fixed[2]  # blue, blue, orange
    paper = colour["paper: max OUT-only baseline per target"]
    assert paper[2] > paper[1] and paper[0] > paper[1]  # purple: no one attack
    plots.plt.close(fig)


def test_a_roc_panel_draws_the_headlines_attacks_or_the_best_few():
    scores = normalise_scores(fake_scores())
    present = set(scores["label"])
    headline = _headline([("Leaky", "leaky"), ("best OUT-only baseline", "loss"), ("again", "loss"),
                          ("paper", "max OUT-only baseline per target"), ("blind", "blind_text")])
    assert roc_labels(headline, pd.DataFrame(), "code", present) == ["leaky", "loss", "blind_text"]
    metrics = summarise(scores.assign(is_member=scores["is_member"].astype(bool)), n_boot=0)
    picked = roc_labels(headline.iloc[:0], metrics, "code", present)  # no headline: the best AUROCs of the domain
    rows = metrics[(metrics["level"] == "domain") & (metrics["domain"] == "code") & ~metrics["null_check"]]
    assert picked == list(rows.sort_values("auroc", ascending=False)["label"])[:plots.MAX_CURVES]
    many = {f"a{i}" for i in range(10)}
    assert len(roc_labels(headline.iloc[:0], pd.DataFrame(), "code", many)) == plots.MAX_CURVES
