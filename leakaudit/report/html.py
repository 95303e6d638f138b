"""One self-contained HTML page: inline CSS, images embedded as base64 PNG, every text HTML-escaped."""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1150px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;font-size:.88em;margin:.6em 0} th,td{border:1px solid #ccc;padding:3px 8px;
text-align:right} th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:.4em 0} pre{background:#f7f7f7;padding:.8em;overflow:auto;
font-size:.85em} .pass{color:#17692d;font-weight:600} .fail{color:#b00020;font-weight:600}
.note{color:#555;font-size:.9em} details{margin:.6em 0} .wide{overflow-x:auto;max-width:100%}
"""


def esc(s: object) -> str:
    return html.escape(str(s))


def table(df: pd.DataFrame, *, floatfmt: str = "{:.3f}") -> str:
    """DataFrame -> escaped HTML table without the index, in a box that scrolls sideways when the table is wider than
    the page (so a wide table never stretches the page)."""
    if df.empty:
        return '<p class="note">(no rows)</p>'
    return '<div class="wide">' + df.to_html(index=False, escape=True, na_rep="–", border=0,
                                             float_format=lambda x: floatfmt.format(x)) + "</div>"


def image(path: Path, alt: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def section(title: str, *parts: str, anchor: str = "") -> str:
    aid = f' id="{esc(anchor)}"' if anchor else ""
    return f"<section{aid}><h2>{esc(title)}</h2>\n" + "\n".join(parts) + "\n</section>"


def page(title: str, subtitle: str, sections: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>\n"
            f"<h1>{esc(title)}</h1><p class=\"note\">{esc(subtitle)}</p>\n" + "\n".join(sections)
            + "\n</body></html>\n")
