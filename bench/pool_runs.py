"""Several finished runs' real targets pooled into one table: the pooled AUROC [95% CI] of every attack, the
headline (Leaky against the best baseline of each family) and the paired Leaky − baseline differences, as the report
computes them for one run (issue 14: the rule for ME8-3 reads Leaky against the fixed-text attacks over both fresh
seeds together; where the runs carry offline references, the ME8off8 rule reads Leaky@offline the same way).
Trains, samples and scores nothing.

Each run's targets keep their own labels and scores; a target is renamed '<run folder>/<target>' so two seeds'
`math-s0` stay two targets. Records stay named by record_id, so a record that is a candidate in several runs is one
cluster of the bootstrap (its rows are correlated through the record's text), as the report treats a record scored
by several targets of one run. Null targets are left out of every table above; they are pooled apart, into the
null check the report prints for one run (each attack's AUROC over all runs' null targets, whose labels no student
trained on, with its CI and whether it holds 0.5): one null target per run gives 24 candidates, too few to tell a
null of 0.674 from chance, and pooling the seeds' null targets is the check that costs no training.

    python bench/pool_runs.py RUN RUN [...] [--json bench/results/pooled_....json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from leakaudit.errors import InputError
from leakaudit.metrics import headline_table, leaky_vs_baselines, summarise
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
    """(n_boot, seed) the run's report used, as its metrics.json records them (read as bench/run_table.py does)."""
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


def pooled_tables(scores: pd.DataFrame, *, n_boot: int, seed: int) -> dict[str, pd.DataFrame]:
    """summarise / headline_table / leaky_vs_baselines over pooled rows; 'attacks' = the level-'all' rows."""
    metrics = summarise(scores, n_boot=n_boot, seed=seed)
    headline = headline_table(metrics)
    versus = leaky_vs_baselines(scores, headline, n_boot=n_boot, seed=seed)
    attacks = metrics[metrics["level"] == "all"].sort_values("auroc", ascending=False).reset_index(drop=True)
    return {"attacks": attacks, "headline": headline, "versus": versus}


def goal_reading(headline: pd.DataFrame) -> dict:
    """Issue 14's goal on the pooled rows: Leaky's CI above the best fixed-text baseline's CI (lo > hi).

    The best fixed-text baseline is headline_table's, the strongest over both reference designs. Where the runs
    carry offline references, 'offline' reads Leaky@offline against that same baseline (the ME8off8 rule)."""
    h = headline[headline["domain"] == "all"].set_index("method")
    if "best fixed baseline" not in h.index:
        return {"reached": None}
    fx = h.loc["best fixed baseline"]

    def against_fixed(method: str) -> dict:
        lk = h.loc[method]
        return {"reached": bool(lk["auroc_lo"] > fx["auroc_hi"]), "leaky_attack": lk["attack"],
                "leaky_lo": float(lk["auroc_lo"]), "fixed_attack": fx["attack"], "fixed_hi": float(fx["auroc_hi"])}

    out = against_fixed("Leaky") if "Leaky" in h.index else {"reached": None}
    if "Leaky, offline references" in h.index:
        out["offline"] = against_fixed("Leaky, offline references")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        n_boot, seed = common_bootstrap_settings(args.runs)
        rows = split_null(labelled_rows(args.runs))  # every run read once
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)  # the project's code for bad input; nothing has been written
    scores = rows[False]
    t = pooled_tables(scores, n_boot=n_boot, seed=seed)
    goal = goal_reading(t["headline"])
    null = pooled_null_check(rows[True], n_boot=n_boot, seed=seed)
    cols = ["label", "family", "n_targets", "auroc", "auroc_lo", "auroc_hi", "n_pos", "n_neg"]
    out = {"runs": [str(r) for r in args.runs], "n_boot": n_boot, "seed": seed,
           "n_records": int(scores["record_id"].nunique()), "attacks": t["attacks"][cols].to_dict("records"),
           "headline": t["headline"].to_dict("records"), "versus": t["versus"].to_dict("records"), "goal": goal,
           "null_check": null.to_dict("records")}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float) + "\n")
    print(f"{len(args.runs)} runs, {out['n_records']} distinct records, {n_boot} resamples (seed {seed})")
    print(t["attacks"][cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(t["versus"][["domain", "leaky", "family", "baseline", "Δ AUROC [95% CI]", "verdict"]].to_string(index=False))
    print(f"goal (Leaky's CI above the best fixed-text CI): {goal}")
    if not null.empty:
        print("null targets pooled (labels no student trained on; a CI without 0.5 is a false signal):")
        print(null.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
