"""The report section of an audit whose target is an API: which attacks ran, which were skipped and why, what
the server was found to honour, and which candidates were excluded (audit.json's "api", written by
leakaudit.signals.api_stage.api_summary)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from leakaudit.io import read_json
from leakaudit.report import html as H


def load_api(run_root: str | Path) -> dict | None:
    """audit.json's "api" section, or None (a study, or an audit of a local target)."""
    path = Path(run_root) / "audit.json"
    return read_json(path).get("api") if path.is_file() else None


def api_section(api: dict | None) -> str:
    """HTML for the section, '' without an API target."""
    if not api:
        return ""
    attacks = api.get("attacks", {})
    rows = [{"attack": a, "status": "run", "why": ""} for a in attacks.get("run", [])]
    rows += [{"attack": a, "status": "skipped", "why": why} for a, why in attacks.get("skipped", {}).items()]
    caps = api.get("capabilities", {})
    found = ", ".join(f"{k}: {caps.get(k)}" for k in ("n", "seed", "token_ids", "fixed_text_mode"))
    notes = "".join(f"<li>{H.esc(n)}</li>" for n in caps.get("notes", []))
    excluded = api.get("excluded", {})
    ex_table = (H.table(pd.DataFrame([{"record_id": r, "reason": why} for r, why in excluded.items()]))
                if excluded else "")
    return H.section(
        "Attacks run / skipped and why",
        f'<p>Target: {H.esc(api.get("model"))} at {H.esc(api.get("base_url"))} (an OpenAI-compatible API). '
        f'The server was found to honour {H.esc(found)}.</p>',
        f"<ul>{notes}</ul>" if notes else "",
        H.table(pd.DataFrame(rows)),
        f'<p>{api.get("n_excluded", 0)} of {api.get("n_requested", "?")} candidates excluded from every attack '
        "(their sampled token ids could not be recovered exactly):</p>" + ex_table,
        anchor="api-attacks")
