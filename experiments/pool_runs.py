"""docs/results.md: the headline's pooled rows (math, 8 passes, seeds 2-5 pooled) and docs/protocol.md's decision.

Several finished runs' real targets read together, as the report reads one run: every attack's mean per-target
AUROC with its two-level bootstrap CI and the paired difference Leaky minus it (leakaudit.per_target), the headline
(Leaky against the best OUT-only baseline, online attacks beside it) and the protocol's decision rule
(docs/protocol.md): Leaky's paired CI against the best OUT-only baseline above 0, and its TPR at 1% FPR on the
per-target-normalised pool above that baseline's; the goal block also gives that TPR gap's bootstrap CI
(low_fpr_difference), which the rule does not use. With --dev, the baselines are chosen on development runs and read
on these (selection-free). Trains, samples and scores nothing.

Each run's targets keep their own labels and scores; a target is renamed '<run folder>/<target>' so two seeds'
`math-s0` stay two targets. Records stay named by record_id, so a record that is a candidate in several runs is one
cluster of the bootstrap (its rows are correlated through the record's text), as the report treats a record scored
by several targets of one run. Null targets are left out of every table above; they are pooled apart, into the
null check the report prints for one run (each attack's AUROC over all runs' null targets, whose labels no student
trained on, with its CI and whether it holds 0.5): one null target per run gives 24 candidates, too few to tell a
null of 0.674 from chance, and pooling the seeds' null targets is the check that costs no training.

    python experiments/pool_runs.py RUN RUN [...] [--dev DEV_RUN ...] [--json experiments/results/pooled_....json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from leakaudit.errors import InputError
from leakaudit.metrics import normalise_scores, normalise_within_target, summarise, tpr_at_fpr
from leakaudit.per_target import (IN_OUT, OUT_ONLY, TargetScores, choose_baseline, headline_table, mean_target_tables,
                                  target_matrices)
from leakaudit.report import load_run, null_check_table


def labelled_rows(run_dirs: list[Path]) -> pd.DataFrame:
    """The labelled score rows of every run, real and null targets, targets renamed '<run folder>/<target>'.

    Raises InputError when two runs share a folder name (their targets would merge into one) or when one attack
    label was run with other parameters in another run (its rows would be pooled as one attack, or split into two
    labels that each read one run)."""
    names = [d.name for d in run_dirs]
    for d in run_dirs:
        if names.count(d.name) > 1:
            raise InputError("two runs share this folder name, so their targets would merge; pool differently named "
                             "folders (copy or link one under another name)", path=str(d))
    frames = []
    for d in run_dirs:
        lab = load_run(d).labelled
        frames.append(lab.assign(target=d.name + "/" + lab["target"].astype(str),
                                 is_member=lab["is_member"].astype(bool), null_check=lab["null_check"].astype(bool)))
    rows = pd.concat(frames, ignore_index=True)
    if "params" in rows:
        run = rows["target"].str.split("/", n=1).str[0]
        for label, by_params in rows.assign(run=run).groupby("attack")[["params", "run"]]:
            variants = by_params.groupby("params")["run"].unique()
            if len(variants) > 1:
                said = "; ".join(f"{', '.join(sorted(r))}: {p}" for p, r in variants.items())
                raise InputError(f"attack {label!r} was run with other parameters in other runs ({said}); pooled "
                                 "runs must score every label alike", field=f"attack {label}")
    return rows


def pooled_scores(run_dirs: list[Path], *, null_check: bool = False) -> pd.DataFrame:
    """The real-target rows of labelled_rows (null-target rows instead when `null_check`)."""
    return split_null(labelled_rows(run_dirs))[null_check]


def split_null(rows: pd.DataFrame) -> dict[bool, pd.DataFrame]:
    """labelled_rows split by null_check: {False: real-target rows, True: null-target rows}."""
    return {flag: rows[rows["null_check"] == flag].reset_index(drop=True) for flag in (False, True)}


def pooled_null_check(null: pd.DataFrame, *, n_boot: int, seed: int) -> pd.DataFrame:
    """The report's null-check table over pooled null-target rows (pooled_scores(..., null_check=True)); empty when
    there are none."""
    if null.empty:
        return pd.DataFrame()
    return null_check_table(summarise(null, n_boot=n_boot, seed=seed))


def bootstrap_settings(run_dir: Path) -> tuple[int, int]:
    """(n_boot, seed) the run's report used, as its metrics.json records them (read as experiments/run_table.py does)."""
    mj = json.loads((run_dir / "metrics.json").read_text())
    return int((mj.get("bootstrap") or {}).get("n_boot", 1000)), int((mj.get("seeds") or {}).get("bootstrap") or 0)


def common_bootstrap_settings(run_dirs: list[Path]) -> tuple[int, int]:
    """The (n_boot, seed) every run's report used; InputError naming the first run that differs from the first."""
    first = bootstrap_settings(run_dirs[0])
    for d in run_dirs[1:]:
        if bootstrap_settings(d) != first:
            raise InputError(f"its report's bootstrap (n_boot, seed) = {bootstrap_settings(d)} differs from "
                             f"{first} of {run_dirs[0]}; pooled runs must be read with one bootstrap",
                             path=str(d / "metrics.json"))
    return first


def pooled_tables(scores: pd.DataFrame, *, n_boot: int, seed: int,
                  chosen: dict[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """The report's tables over pooled real-target rows: 'metrics' (summarise: per target, and pooled on
    per-target-normalised scores), 'mean_target' (mean per-target AUROC, two-level CI, paired Δ), 'headline', and
    'attacks' (the mean-target rows of the widest scope, strongest first). chosen: headline method -> label fixed on
    development runs (`dev_choices`)."""
    metrics = summarise(scores, n_boot=n_boot, seed=seed)
    mean_target = mean_target_tables(normalise_scores(scores), n_boot=n_boot, seed=seed)
    headline = headline_table(mean_target, metrics, chosen=chosen)
    widest = "all" if "all" in set(mean_target["domain"]) else mean_target["domain"].iloc[0]
    attacks = (mean_target[mean_target["domain"] == widest].sort_values("auroc", ascending=False)
               .reset_index(drop=True))
    return {"metrics": metrics, "mean_target": mean_target, "headline": headline, "attacks": attacks}


def dev_choices(dev_scores: pd.DataFrame, *, n_boot: int, seed: int) -> dict[str, str]:
    """Headline method -> the baseline with the highest mean per-target AUROC on the development runs' real targets
    (widest scope), for the selection-free reading of the test runs."""
    t = pooled_tables(dev_scores, n_boot=0, seed=seed)["attacks"]
    picks = {"best OUT-only baseline": choose_baseline(t, threat=OUT_ONLY),
             "best same-trajectory baseline (OUT-only)": choose_baseline(t, threat=OUT_ONLY, family="fresh"),
             "best online attack (IN+OUT)": choose_baseline(t, threat=IN_OUT)}
    return {k: v for k, v in picks.items() if v is not None}


def goal_reading(headline: pd.DataFrame) -> dict:
    """The decision rule of docs/protocol.md on one scope of the headline (the widest): Leaky leads when the paired
    CI of Leaky minus the best OUT-only baseline lies above 0 and Leaky's TPR at 1% FPR on the normalised pool is
    above that baseline's. Both halves are reported; 'reached' needs both (None without the rows)."""
    scope = "all" if "all" in set(headline["domain"]) else headline["domain"].iloc[0]
    h = headline[headline["domain"] == scope].set_index("method")
    if not {"Leaky", "best OUT-only baseline"} <= set(h.index):
        return {"reached": None, "scope": scope}
    lk, base = h.loc["Leaky"], h.loc["best OUT-only baseline"]
    tpr = "TPR@1% (normalised pool)"
    auroc_lead = bool(base["delta_lo"] > 0)
    tpr_lead = bool(pd.notna(lk[tpr]) and pd.notna(base[tpr]) and lk[tpr] > base[tpr])
    return {"reached": auroc_lead and tpr_lead, "scope": scope, "leaky_attack": lk["attack"],
            "baseline_attack": base["attack"], "baseline_chosen_on": base["chosen_on"],
            "leaky_auroc": float(lk["auroc"]), "baseline_auroc": float(base["auroc"]),
            "delta": float(base["delta"]), "delta_lo": float(base["delta_lo"]), "delta_hi": float(base["delta_hi"]),
            "auroc_lead": auroc_lead, "leaky_tpr@1%": float(lk[tpr]), "baseline_tpr@1%": float(base[tpr]),
            "tpr_lead": tpr_lead, "n_neg": int(lk["n_neg"]) if pd.notna(lk["n_neg"]) else None}


def pooled_tpr_gap(targets: list[TargetScores], alpha: float = 0.01) -> float:
    """Row 0's TPR at `alpha` FPR minus row 1's, under one threshold over the targets' scores pooled (give targets
    whose scores are normalised within each target, as the rule reads them)."""
    y = np.concatenate([t.y for t in targets])
    s = np.concatenate([t.scores for t in targets], axis=1)                                  # [2, N]
    return tpr_at_fpr(y, s[0], alpha) - tpr_at_fpr(y, s[1], alpha)


def decision(scores: pd.DataFrame, *, n_boot: int, seed: int, chosen: dict[str, str] | None = None) -> dict:
    """goal_reading of the real-target rows' headline (the baselines fixed by `chosen` when given), with the TPR@1%
    gap's bootstrap CI (low_fpr_difference) as "tpr_difference" when the headline has the rows the rule reads."""
    goal = goal_reading(pooled_tables(scores, n_boot=n_boot, seed=seed, chosen=chosen)["headline"])
    if goal["reached"] is not None:
        goal["tpr_difference"] = low_fpr_difference(scores, goal["leaky_attack"], goal["baseline_attack"],
                                                    n_boot=n_boot, seed=seed)
    return goal


def low_fpr_difference(scores: pd.DataFrame, primary: str, versus: str, *, n_boot: int, seed: int,
                       alpha: float = 0.01, level: float = 0.95) -> dict[str, float]:
    """TPR at `alpha` FPR of `primary` minus `versus` as the rule reads it (real-target scores normalised within each
    target, pooled under one threshold), with a percentile CI from a two-level bootstrap: targets with replacement,
    then members and non-members with replacement inside each drawn target. Written here because the package
    bootstraps AUROCs only (leakaudit.per_target.two_level_bootstrap returns AUROCs, not the draws). NaN when the
    pool has fewer than 1/alpha non-members (the rate cannot be resolved)."""
    nan = {"delta": float("nan"), "lo": float("nan"), "hi": float("nan")}
    rows = scores[scores["label"].isin([primary, versus])]
    targets = target_matrices(normalise_within_target(rows), [primary, versus])
    if alpha * int(sum((~t.y).sum() for t in targets)) < 1:
        return nan
    point = pooled_tpr_gap(targets, alpha)
    rng, boot = np.random.default_rng(seed), []
    for _ in range(n_boot):
        drawn = []
        for i in rng.integers(0, len(targets), size=len(targets)):
            t = targets[i]
            pos, neg = np.flatnonzero(t.y), np.flatnonzero(~t.y)
            idx = np.r_[rng.choice(pos, len(pos)), rng.choice(neg, len(neg))]
            drawn.append(TargetScores(t.key, t.y[idx], t.scores[:, idx]))
        boot.append(pooled_tpr_gap(drawn, alpha))
    if not boot:
        return {**nan, "delta": point}
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return {"delta": point, "lo": float(lo), "hi": float(hi)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--dev", nargs="+", type=Path, default=[],
                    help="development runs: the headline's baselines are chosen on them and read on RUNS")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        n_boot, seed = common_bootstrap_settings(args.runs)
        rows = split_null(labelled_rows(args.runs))  # every run read once
        chosen = dev_choices(pooled_scores(args.dev), n_boot=n_boot, seed=seed) if args.dev else None
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)  # the project's code for bad input; nothing has been written
    scores = rows[False]
    t = pooled_tables(scores, n_boot=n_boot, seed=seed, chosen=chosen)
    goal = decision(scores, n_boot=n_boot, seed=seed, chosen=chosen)
    null = pooled_null_check(rows[True], n_boot=n_boot, seed=seed)
    cols = ["label", "family", "threat_model", "n_targets", "auroc", "auroc_lo", "auroc_hi", "delta", "delta_lo",
            "delta_hi"]
    show = ["domain", "method", "attack", "threat_model", "n_targets", "mean per-target AUROC [95% CI]",
            "Δ Leaky − this [95% CI]", "TPR@1% (normalised pool)", "n_neg", "chosen_on"]
    out = {"runs": [str(r) for r in args.runs], "dev_runs": [str(r) for r in args.dev], "chosen_on_dev": chosen,
           "n_boot": n_boot, "seed": seed, "n_records": int(scores["record_id"].nunique()),
           "attacks": t["attacks"][cols].to_dict("records"), "headline": t["headline"].to_dict("records"),
           "goal": goal, "null_check": null.to_dict("records")}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float) + "\n")
    print(f"{len(args.runs)} runs, {out['n_records']} distinct records, {n_boot} resamples (seed {seed})")
    print(t["attacks"][cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(t["headline"][show].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"decision rule (paired CI of Leaky − best OUT-only baseline above 0, and a higher TPR@1%): {goal}")
    if not null.empty:
        print("null targets pooled (labels no student trained on; a CI without 0.5 is a false signal):")
        print(null.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
