"""docs/results.md: one run's column of its tables (and README's study tables), read from finished run directories.

One column per run, one row per measurement. Every number is read from a run's own files (metrics.csv, metrics.json,
realism.json, teacher_literalness.json, sample_literalness.json); nothing is computed here that the report does not
compute, so a README column is reproduced by

    python experiments/run_table.py results/regime_code_restated_seed0 results/regime_code_prepared_seed0 --names R,P

Attack rows are the mean over a run's real targets of the per-target AUROC with its two-level bootstrap CI
(metrics.csv level target_mean), each labelled with its threat model (OUT-only / IN+OUT); TPR at 1% FPR is read on the
per-target-normalised pool. For a run of several domains (a pool of shards, `leakaudit pool`) the scope is all
domains, or one domain's with `--domain NAME`. The realism and literalness rows are per domain, each labelled with its
domain when the run has several.

    python experiments/run_table.py runs/cpu-full-pooled3                # 24 targets of three domains
    python experiments/run_table.py runs/cpu-full-pooled3 runs/cpu-full-pooled3 --domain all,math --names all,math
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _ci(row) -> str:
    if pd.isna(row.auroc_lo):
        return f"{row.auroc:.3f}"
    return f"{row.auroc:.3f} [{row.auroc_lo:.3f}, {row.auroc_hi:.3f}]"


def _tm(row) -> str:
    return f" ({row.threat_model})" if row.threat_model == "IN+OUT" else ""


def pooled_rows(m: pd.DataFrame, domain: str | None) -> tuple[str, pd.DataFrame, bool]:
    """(domain, metrics.csv rows of the pooled level, whether the run has several domains): domain None = the
    run's only domain, or 'all' when it has several; 'all' = the level pooled over every domain; a name = that
    domain's level."""
    domains = sorted(m[m.level == "domain"].domain.unique())
    several = len(domains) > 1
    if domain is None:
        domain = "all" if several else domains[0]
    if domain == "all":
        return domain, m[m.level == ("all" if several else "domain")], several
    if domain not in domains:
        raise SystemExit(f"--domain {domain}: not a domain of this run (it has {', '.join(domains)})")
    return domain, m[(m.level == "domain") & (m.domain == domain)], several


def column(root: Path, domain: str | None = None) -> dict[str, str]:
    """Row label -> cell for one run (`domain`: pooled_rows's choice)."""
    mj = _read(root / "metrics.json") or {}
    # a kept result holds metrics.json only: its `results` are metrics.csv's rows
    m = pd.read_csv(root / "metrics.csv") if (root / "metrics.csv").is_file() else pd.DataFrame(mj.get("results") or [])
    m["null_check"] = m.null_check.astype(bool)
    domain, level, several = pooled_rows(m, domain)
    mean = m[(m.level == "target_mean") & (m.domain == (domain if domain != "all" else "*"))]
    if mean.empty and not several:  # one domain: its target_mean rows carry the domain's name
        mean = m[m.level == "target_mean"]
    if mean.empty:
        raise SystemExit(f"{root}: metrics.csv has no mean per-target rows; rebuild its report (leakaudit report)")
    dom = mean[~mean.null_check].set_index("label")
    null = mean[mean.null_check].set_index("label")
    pool = level[~level.null_check].set_index("label")
    tgt = m[(m.level == "target") & ~m.null_check]
    if domain != "all":
        tgt = tgt[tgt.domain == domain]
    has = lambda a: a in dom.index  # noqa: E731
    cells: dict[str, str] = {}
    lk = "leaky@offline" if has("leaky@offline") else "leaky"
    n_neg = int(pool.loc[lk, "n_neg"])
    cells["targets / members / non-members (all targets)"] = (
        f"{tgt.target.nunique()} / {int(pool.loc[lk, 'n_pos'])} / {n_neg}")
    for label, a in (("**Leaky** (target − max OUT reference, rectified)", "leaky"),
                     ("Leaky, offline references", "leaky@offline"),
                     ("fresh_gap_max (same, not rectified)", "fresh_gap_max"),
                     ("fresh_gap_max, offline references", "fresh_gap_max@offline"),
                     ("fresh_gap_mean, offline references", "fresh_gap_mean@offline"),
                     ("fresh_loss (target's log p of its own samples)", "fresh_loss"),
                     ("fresh_gap_base (target − base)", "fresh_gap_base"),
                     ("LOSS (fixed privileged text)", "loss")):
        if has(a):
            cells[label] = _ci(dom.loc[a])
    cells["Min-K% / Min-K%++ / zlib"] = " / ".join(f"{dom.loc[a, 'auroc']:.3f}"
                                                   for a in ("min_k", "min_k_plus_plus", "zlib") if has(a))
    for label, a in (("ref_ratio_refs (target − reference students)", "ref_ratio_refs"),
                     ("ref_ratio_refs, offline references", "ref_ratio_refs@offline"),
                     ("LiRA offline, offline references", "lira_offline@offline"),
                     # the offline design runs an online attack's offline form (leakaudit.scoring.offline_attacks)
                     ("RMIA offline, offline references", "rmia_offline@offline"),
                     ("LiRA online (IN+OUT)", "lira_online"), ("RMIA online (IN+OUT)", "rmia"),
                     ("paper: max OUT-only baseline per target", "max OUT-only baseline per target"),
                     ("blind text baseline (no model; a check)", "blind_text")):
        if has(a):
            cells[label] = _ci(dom.loc[a])
    # 1% of fewer than 100 negatives is under one false positive: not resolvable, and said so
    tpr = [f"{pool.loc[a, 'tpr@0.01']:.2f}" for a in (lk, "fresh_loss", "loss", "rmia") if a in pool.index]
    cells[f"TPR@1% FPR, normalised pool: {lk} / fresh_loss / LOSS / RMIA (negatives)"] = (
        " / ".join(tpr) + f" ({n_neg})" if 0.01 * n_neg >= 1 else f"not resolvable ({n_neg} negatives)")
    if lk in null.index:
        cells[f"null target (trained on no candidate), {lk}"] = _ci(null.loc[lk])
    per = tgt[tgt.label == lk].sort_values("target").auroc
    cells[f"per target {lk}"] = " / ".join(f"{v:.2f}" for v in per)
    for h in mj.get("headline") or []:
        if h.get("domain") != domain or "mean per-target AUROC [95% CI]" not in h or h["method"] == "Leaky":
            continue
        cells[f"headline: {h['method']} — which; Δ {lk} − it [95% CI]"] = (
            f"{h['attack']}; {h['Δ Leaky − this [95% CI]']}")
    # model ids are '<domain>-<role><k>' (leakaudit.membership)
    health = [h for h in mj.get("training_health") or []
              if domain == "all" or h["model_id"].startswith(domain + "-")]
    if health:
        last = [h["kl_last"] for h in health]
        cells["training check: students ending closer to the teacher (final KL)"] = (
            f"{sum(h['moved_toward_teacher'] for h in health)}/{len(health)} ({min(last):.2f}–{max(last):.2f})")
    targets = set(tgt.target)  # the real targets of the pooled rows
    balance = [r["tvd"] for r in mj.get("reference_balance") or [] if r["target"] in targets]
    if balance:
        cells["design check: largest TVD of reference identity"] = f"{max(balance):.3f}"
    labelled = several and domain == "all"  # rows of every domain: each names its own
    cells.update(_realism_cells(root, domain, labelled))
    cells.update(_literalness_cells(root, domain, labelled, several))
    return cells


def _labelled(label: str, d: str, labelled: bool) -> str:
    return f"[{d}] {label}" if labelled else label


def _realism_cells(root: Path, domain: str, labelled: bool) -> dict[str, str]:
    """The realism card's rows of `domain` ('all': of every domain, each labelled)."""
    card = _read(root / "realism.json")
    if not card or not card.get("measured"):
        return {}
    out = {}
    for d, v in card["domains"].items():
        if domain not in ("all", d):
            continue
        lab = lambda label: _labelled(label, d, labelled)  # noqa: E731
        real = [t for t in card["targets"] if not t.get("null_check") and t.get("training")
                and t.get("domain", d) == d]
        if real:
            t = real[0]["training"]
            out[lab("realism: training set per student (records × passes; members among them)")] = (
                f"{t['n_records']} × {t['epochs']} ({t['n_members']} members, {t['n_background']} background)")
        lv = v["levels"]
        kl = lambda k: (lv.get(k) or {}).get("kl", {}).get("per_token")  # noqa: E731
        ent = lambda k: (lv.get(k) or {}).get("entropy", {}).get("per_token")  # noqa: E731
        out[lab("realism: KL(target‖base) on own samples, nats/token: members / held out")] = (
            f"{kl('members'):.3f} / {kl('held_out'):.3f}")
        out[lab("realism: sample entropy, nats/token: members / held out")] = (
            f"{ent('members'):.3f} / {ent('held_out'):.3f}")
        q = (lv.get("held_out") or {}).get("quality") or {}
        if "similarity" in q:
            out[lab("realism: held-out samples vs canonical body: similarity / parses")] = (
                f"{q['similarity']:.3f} / {q.get('parses', float('nan')):.2f}")
        for key in ("final_answer_match", "label_match"):  # realism.py's math and medical measures
            if key in q:
                out[lab(f"realism: held-out {key.replace('_', ' ')}")] = f"{q[key]:.3f}"
        s = (lv.get("all") or {}).get("samples") or {}
        if s:
            out[lab("realism: distinct samples per record / mean tokens / at the token cap")] = (
                f"{s['distinct_fraction']:.2f} / {s['mean_tokens']:.1f} / {s['at_cap_fraction']:.2f}")
            if s.get("seq_rep_4") is not None:  # cards written before it lack it
                out[lab("realism: seq-rep-4 of the samples (repeated 4-grams; near 1 = a loop)")] = (
                    f"{s['seq_rep_4']:.3f}")
    return out


def _literalness_cells(root: Path, domain: str, labelled: bool, several: bool) -> dict[str, str]:
    """The teacher's literalness per domain (`domain` or, for 'all', every one) and the samples' literalness
    pooled over the run's real targets (not split by domain: the report pools it once)."""
    out = {}
    teacher = _read(root / "teacher_literalness.json")
    for d, v in (teacher or {}).get("domains", {}).items():
        if domain not in ("all", d):
            continue
        label = (f"teacher ({teacher['teacher']}): log p/token of the privileged text with / without context; "
                 "restated with context")
        out[_labelled(label, d, labelled)] = (
            f"{v['privileged_with_context']:.3f} / {v['privileged_without_context']:.3f}; "
            f"{v.get('restated_with_context', float('nan')):.3f}")
    samples = _read(root / "sample_literalness.json")
    if samples and samples.get("pooled_real_targets") and (domain == "all" or not several):  # pooled once
        p = samples["pooled_real_targets"]
        out["samples vs privileged text (difflib): members / non-members (AUROC)"] = (
            f"{p['members']:.3f} / {p['non_members']:.3f} ({p['auroc']:.3f})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--names", default="", help="comma-separated column names (default: the run directory names)")
    ap.add_argument("--domain", default="", help="comma-separated, one per run: a domain's name or 'all' (the "
                                                 "default: the run's only domain, or 'all' for several)")
    args = ap.parse_args()
    names = args.names.split(",") if args.names else [r.name for r in args.runs]
    domains = args.domain.split(",") if args.domain else [None] * len(args.runs)
    if len(domains) != len(args.runs):
        raise SystemExit(f"--domain names {len(domains)} domains for {len(args.runs)} runs")
    cols = [column(r, d) for r, d in zip(args.runs, domains)]
    rows = list(dict.fromkeys(k for c in cols for k in c))
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        print(f"| {r} | " + " | ".join(c.get(r, "") for c in cols) + " |")


if __name__ == "__main__":
    main()
