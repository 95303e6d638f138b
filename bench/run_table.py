"""README's study tables from finished run directories: one column per run, one row per measurement.

Every number is read from a run's own files (metrics.csv, metrics.json, realism.json, teacher_literalness.json,
sample_literalness.json); nothing is computed here that the report does not compute, so a README column is
reproduced by

    python bench/run_table.py runs/sweep/regime_code_restated runs/sweep/regime_code_prepared [--names R,P]

Pooled rows are over a run's real targets (the report's domain level); with several domains a row is the first
domain's (one domain per run in the README's tables).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _ci(row) -> str:
    return f"{row.auroc:.3f} [{row.auroc_lo:.3f}, {row.auroc_hi:.3f}]"


def column(root: Path) -> dict[str, str]:
    """Row label -> cell for one run."""
    m = pd.read_csv(root / "metrics.csv")
    mj = _read(root / "metrics.json") or {}
    dom = m[(m.level == "domain") & ~m.null_check].set_index("attack")
    tgt = m[(m.level == "target") & ~m.null_check]
    null = m[(m.level == "domain") & m.null_check].set_index("attack")
    has = lambda a: a in dom.index  # noqa: E731
    cells: dict[str, str] = {}
    n_neg = int(dom.loc["leaky", "n_neg"])
    cells["targets / members / non-members (pooled rows)"] = (
        f"{tgt.target.nunique()} / {int(dom.loc['leaky', 'n_pos'])} / {n_neg}")
    for label, a in (("**Leaky** (target − max OUT reference, rectified)", "leaky"),
                     ("Leaky, offline references", "leaky@offline"),
                     ("fresh_gap_max (same, not rectified)", "fresh_gap_max"),
                     ("fresh_gap_max, offline references", "fresh_gap_max@offline"),
                     ("fresh_loss (target's log p of its own samples)", "fresh_loss"),
                     ("fresh_gap_base (target − base)", "fresh_gap_base"),
                     ("LOSS (fixed privileged text)", "loss")):
        if has(a):
            cells[label] = _ci(dom.loc[a])
    cells["Min-K% / Min-K%++ / zlib"] = " / ".join(f"{dom.loc[a, 'auroc']:.3f}"
                                                   for a in ("min_k", "min_k_plus_plus", "zlib") if has(a))
    for label, a in (("ref_ratio_refs (target − reference students)", "ref_ratio_refs"),
                     ("ref_ratio_refs, offline references", "ref_ratio_refs@offline"),
                     ("LiRA online", "lira_online"), ("LiRA offline, offline references", "lira_offline@offline"),
                     ("RMIA", "rmia"),
                     # the offline design runs an online attack's offline form (leakaudit.audit.offline_attacks)
                     ("RMIA offline, offline references", "rmia_offline@offline"),
                     ("blind text baseline (no model)", "blind_text")):
        if has(a):
            cells[label] = _ci(dom.loc[a])
    cells[f"TPR@1% FPR: Leaky / fresh_loss / LOSS / RMIA ({n_neg} negatives)"] = " / ".join(
        f"{dom.loc[a, 'tpr@0.01']:.2f}" for a in ("leaky", "fresh_loss", "loss", "rmia") if has(a))
    if "leaky" in null.index:
        cells["null target (trained on no candidate), Leaky"] = _ci(null.loc["leaky"])
    per = tgt[tgt.attack == "leaky"].sort_values("target").auroc
    cells["per target Leaky"] = " / ".join(f"{v:.2f}" for v in per)
    health = mj.get("training_health") or []
    if health:
        last = [h["kl_last"] for h in health]
        cells["training check: students ending closer to the teacher (final KL)"] = (
            f"{sum(h['moved_toward_teacher'] for h in health)}/{len(health)} ({min(last):.2f}–{max(last):.2f})")
    balance = [r["tvd"] for r in mj.get("reference_balance") or [] if not r["null_check"]]
    if balance:
        cells["design check: largest TVD of reference identity"] = f"{max(balance):.3f}"
    for p in mj.get("paper_statistics") or []:
        if p["domain"] != "all":
            continue
        who = "null target" if p["null_check"] else "real targets"
        design = "" if p["design"] == "matched" else f", {p['design']} references"
        cells[f"as published ({who}{design}): mean per-target AUROC, Leaky / strongest baseline / strongest "
              "same-trajectory baseline"] = (f"{p['leaky']:.3f} / {p['strongest_baseline']:.3f} / "
                                             f"{p['strongest_fresh_baseline']:.3f}")
    cells.update(_realism_cells(root))
    cells.update(_literalness_cells(root))
    return cells


def _realism_cells(root: Path) -> dict[str, str]:
    card = _read(root / "realism.json")
    if not card or not card.get("measured"):
        return {}
    out = {}
    real = [t for t in card["targets"] if not t.get("null_check") and t.get("training")]
    if real:
        t = real[0]["training"]
        out["realism: training set per student (records × passes; members among them)"] = (
            f"{t['n_records']} × {t['epochs']} ({t['n_members']} members, {t['n_background']} background)")
    for domain, v in card["domains"].items():
        lv = v["levels"]
        kl = lambda k: (lv.get(k) or {}).get("kl", {}).get("per_token")  # noqa: E731
        ent = lambda k: (lv.get(k) or {}).get("entropy", {}).get("per_token")  # noqa: E731
        out["realism: KL(target‖base) on own samples, nats/token: members / held out"] = (
            f"{kl('members'):.3f} / {kl('held_out'):.3f}")
        out["realism: sample entropy, nats/token: members / held out"] = f"{ent('members'):.3f} / {ent('held_out'):.3f}"
        q = (lv.get("held_out") or {}).get("quality") or {}
        if "similarity" in q:
            out["realism: held-out samples vs canonical body: similarity / parses"] = (
                f"{q['similarity']:.3f} / {q.get('parses', float('nan')):.2f}")
        for key in ("final_answer_match", "label_match"):  # realism.py's math and medical measures
            if key in q:
                out[f"realism: held-out {key.replace('_', ' ')}"] = f"{q[key]:.3f}"
        s = (lv.get("all") or {}).get("samples") or {}
        if s:
            out["realism: distinct samples per record / mean tokens / at the token cap"] = (
                f"{s['distinct_fraction']:.2f} / {s['mean_tokens']:.1f} / {s['at_cap_fraction']:.2f}")
            if s.get("seq_rep_4") is not None:  # cards written before it lack it
                out["realism: seq-rep-4 of the samples (repeated 4-grams; near 1 = a loop)"] = f"{s['seq_rep_4']:.3f}"
        break
    return out


def _literalness_cells(root: Path) -> dict[str, str]:
    out = {}
    teacher = _read(root / "teacher_literalness.json")
    if teacher:
        d = next(iter(teacher["domains"].values()))
        out[f"teacher ({teacher['teacher']}): log p/token of the privileged text with / without context; restated "
            "with context"] = (f"{d['privileged_with_context']:.3f} / {d['privileged_without_context']:.3f}; "
                               f"{d.get('restated_with_context', float('nan')):.3f}")
    samples = _read(root / "sample_literalness.json")
    if samples and samples.get("pooled_real_targets"):
        p = samples["pooled_real_targets"]
        out["samples vs privileged text (difflib): members / non-members (AUROC)"] = (
            f"{p['members']:.3f} / {p['non_members']:.3f} ({p['auroc']:.3f})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--names", default="", help="comma-separated column names (default: the run directory names)")
    args = ap.parse_args()
    names = args.names.split(",") if args.names else [r.name for r in args.runs]
    cols = [column(r) for r in args.runs]
    rows = list(dict.fromkeys(k for c in cols for k in c))
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        print(f"| {r} | " + " | ".join(c.get(r, "") for c in cols) + " |")


if __name__ == "__main__":
    main()
