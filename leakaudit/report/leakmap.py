"""Token-level leak map: where in a record's fresh trajectories the target beats its references.

leak_map.json format (written by the pipeline for one leaking record; optional):

    {"record_id": str, "target": str, "domain": str,
     "prompt": str (optional, shown unless redacted),
     "selected": str (optional: which record this is, a member or, without labels, a candidate),
     "reference_reduction": "max" | "mean" (optional: how the gaps combine the references, as the Leaky spec),
     "trajectories": [{"tokens": [str, ...], "gaps": [float, ...]}, ...]}

`tokens` are the decoded tokens of one fresh trajectory sampled from the target; `gaps[t]` is the Leaky per-token
gap log p_target − max (or mean, per reference_reduction) over the OUT references of log p_ref (same length as
`tokens`).  Tokens are coloured by
max(gap, 0): white = no leak, dark red = the target is much more confident than any reference.
"""

from __future__ import annotations

import os

import matplotlib

if not os.environ.get("MPLBACKEND"):  # headless by default; notebooks (ipykernel sets MPLBACKEND) keep theirs
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from leakaudit.errors import InputError  # noqa: E402

CHAR_IN = 0.1     # inches per character cell
LINE_IN = 0.24    # inches per text line
FONT_PT = CHAR_IN * 72 / 0.602  # DejaVu Sans Mono advance is 0.602 em


def validate_leak_map(lm: dict, *, path: str | None = None) -> dict:
    """Check the format above; return it unchanged."""
    for key in ("record_id", "target", "domain", "trajectories"):
        if key not in lm:
            raise InputError("leak map lacks a key", path=path, field=key)
    for i, t in enumerate(lm["trajectories"]):
        if len(t.get("tokens", ())) != len(t.get("gaps", ())):
            raise InputError(f"trajectory {i}: tokens and gaps differ in length", path=path, field="trajectories")
    return lm


def _layout(tokens: list[str], width: int) -> list[tuple[int, int, str]]:
    """(line, column, shown text) of each token, wrapping at `width` characters and at newlines."""
    line, col, out = 0, 0, []
    for tok in tokens:
        shown = tok.replace("\n", "↵").replace("\t", " ") or "∅"
        if col + len(shown) > width and col > 0:
            line, col = line + 1, 0
        out.append((line, col, shown[:width]))
        col += len(shown[:width])
        if "\n" in tok:
            line, col = line + 1, 0
    return out


def leak_map_figure(lm: dict, *, width: int = 90, cmap: str = "Reds") -> plt.Figure:
    """Render every trajectory as coloured monospace text, one block per trajectory, with a colour bar."""
    longest = max((sum(len(t) for t in tr["tokens"]) for tr in lm["trajectories"]), default=1)
    width = max(20, min(width, longest + 1))
    gaps_all = np.concatenate([np.asarray(t["gaps"], float) for t in lm["trajectories"]] or [np.zeros(1)])
    vmax = float(np.nanmax(np.clip(gaps_all, 0, None))) if gaps_all.size else 0.0
    norm, colours = Normalize(0, vmax if vmax > 0 else 1.0), plt.get_cmap(cmap)
    masked = bool(lm.get("redacted"))
    blocks, n_lines = [], 0
    for t in lm["trajectories"]:
        lay = _layout(t["tokens"], width)
        blocks.append((n_lines, lay, t["gaps"]))
        n_lines += (lay[-1][0] + 1 if lay else 1) + 1  # + header line
    fig = plt.figure(figsize=(width * CHAR_IN + 1.6, max(n_lines, 2) * LINE_IN + 0.9))
    ax = fig.add_axes((0.3 / fig.get_figwidth(), 0.1, width * CHAR_IN / fig.get_figwidth(), 0.8))
    for k, (start, lay, gaps) in enumerate(blocks):
        ax.text(0, start + 0.5, f"trajectory {k}", fontsize=FONT_PT * 0.8, fontweight="bold", va="center")
        for (line, col, shown), gap in zip(lay, gaps):
            y = start + 1 + line
            g = 0.0 if gap is None or np.isnan(gap) else max(float(gap), 0.0)
            ax.add_patch(Rectangle((col, y), len(shown), 1, facecolor=colours(norm(g)),
                                   edgecolor="#bbbbbb" if masked else "none", lw=0.5))
            if masked:  # redacted: colour cells only, no text
                continue
            ax.text(col, y + 0.5, shown, fontsize=FONT_PT, family="DejaVu Sans Mono", va="center",
                    color="white" if norm(g) > 0.6 else "black")
    ax.set_xlim(0, width)
    ax.set_ylim(max(n_lines, 1), 0)
    ax.axis("off")
    cax = fig.add_axes((1 - 1.0 / fig.get_figwidth(), 0.15, 0.15 / fig.get_figwidth(), 0.7))
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=colours), cax=cax, label="gap > 0")
    title = f"Leak map: record {lm['record_id']} on target {lm['target']} ({lm['domain']})"
    if lm.get("redacted"):
        title += " — token text [redacted]"
    fig.suptitle(title, x=0.3 / fig.get_figwidth(), ha="left", fontsize=11)
    return fig
