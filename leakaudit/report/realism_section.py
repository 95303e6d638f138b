"""The report's "Targets: realism card" section and metrics.json's summary of it (leakaudit.realism).

`realism_summary(card)` is plain data for metrics.json (`measured`, `reason`, `file`, `rows`: the table rows of
`leakaudit.realism.card_rows`); `realism_section(card)` the HTML: one table row per attacked target and one per
domain pooled over its real targets, then notes (sampling flags, what a target lacked, the base's quality).
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from leakaudit.realism import BASE_QUALITY, ESTIMATE_NOTE, card_rows, summary_line
from leakaudit.report import html as H

COLUMNS = {"target": "target", "domain": "domain", "null_check": "null", "trained": "trained on",
           "members": "members", "background": "background", "passes": "passes", "steps": "steps",
           "member_fraction": "members / trained", "kl_per_token": "KL(t||base) /token",
           "kl_members": "KL members", "kl_non_members": "KL non-members", "kl_per_sequence": "KL /sequence",
           "entropy_per_token": "entropy /token", "mean_tokens": "tokens", "empty_fraction": "empty",
           "distinct_fraction": "distinct", "seq_rep_4": "seq-rep-4", "quality_metric": "quality metric",
           "quality_held_out": "quality held-out", "quality_members": "quality members",
           "parses_held_out": "parses held-out"}
"""card_rows key -> column header of the report's table."""
MISSING = "–"
"""How the table shows a value the card lacks (as html.table's na_rep)."""


def realism_summary(card: Mapping | None) -> dict:
    """metrics.json["realism"]: {measured, reason, file: "realism.json", summary: summary_line, rows: card_rows}."""
    if card is None:
        return {"measured": False, "reason": "no realism card", "file": None, "summary": None, "rows": []}
    return {"measured": bool(card.get("measured")), "reason": card.get("reason"), "file": "realism.json",
            "summary": summary_line(card), "rows": card_rows(card) if card.get("measured") else []}


def realism_table(card: Mapping) -> pd.DataFrame:
    """The table: COLUMNS of card_rows; floats as NaN when missing (shown '–'), counts as text ('–' when
    missing)."""
    df = pd.DataFrame(card_rows(card))
    if df.empty:
        return df
    df = df[[c for c in COLUMNS if c in df]]
    for c in ("trained", "members", "background", "passes", "steps"):
        df[c] = [MISSING if v is None or pd.isna(v) else str(int(v)) for v in df[c]]
    for c in ("member_fraction", "kl_per_token", "kl_members", "kl_non_members", "kl_per_sequence",
              "entropy_per_token", "mean_tokens", "empty_fraction", "distinct_fraction", "seq_rep_4",
              "quality_held_out", "quality_members", "parses_held_out"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    return df.rename(columns=COLUMNS)


def _notes(card: Mapping) -> list[str]:
    """One line per target that lacks an input or was sampled off temperature 1 / top_p 1."""
    lines = []
    for t in card.get("targets", []):
        for n in t.get("notes") or []:
            lines.append(f"{t['target']}: {n}")
        warning = (t.get("sampling") or {}).get("warning")
        if warning:
            lines.append(f"{t['target']}: {warning}")
    return lines


def realism_section(card: Mapping | None) -> str:
    """HTML section "Targets: realism card" (anchor #realism); says why when the card was not measured."""
    if card is None or not card.get("measured"):
        why = (card or {}).get("reason") or "no realism card"
        return H.section("Targets: realism card", f'<p class="note">Not measured: {H.esc(why)}.</p>',
                         anchor="realism")
    parts = [f"<p>{H.esc(summary_line(card))}</p>", H.table(realism_table(card))]
    notes = _notes(card)
    if notes:
        parts.append("<ul>" + "".join(f"<li>{H.esc(n)}</li>" for n in notes) + "</ul>")
    parts.append('<p class="note">Training set from models/&lt;id&gt;/meta.json (members: trained records that '
                 "are candidates; background: meta's n_background, else trained records neither candidate nor "
                 "population; passes: epochs; steps: optimizer steps). KL(target || base) and entropy in nats: "
                 f"{H.esc(ESTIMATE_NOTE)}. tokens: mean sample length; empty: decoded sample blank; distinct: "
                 "distinct samples per record / samples; seq-rep-4: repeated 4-grams per sample (near 1: a loop). Quality on the target's fresh samples, held-out = "
                 "candidates it never trained on (every candidate of a null target): math final-answer match, "
                 "medical label match (the label named last, whole word, case-insensitive), code difflib "
                 "similarity to the canonical body and ast.parse check (never executed). Base model quality: "
                 f"{H.esc(BASE_QUALITY)}. Definitions in realism.json.</p>")
    return H.section("Targets: realism card", *parts, anchor="realism")
