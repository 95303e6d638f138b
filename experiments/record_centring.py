"""docs/results.md: none of its numbers (attacks after removing each record's mean score over targets).

Is an attack held back by what a record shares across targets? Every score less the record's mean score over
all real targets of its domain, on a finished run's scores.parquet. Trains, samples and scores nothing.

In a keep matrix every candidate is IN for half the students and OUT for the other half, so its mean over the
targets carries no label; a score that is mostly the record's own level (a solution the base model already finds
likely, say) ranks records, not memberships, and centring removes that. An attacker cannot do this (it needs the
other targets), so the centred AUROC is a diagnostic of where an attack's noise lies, never an attack. Compared per
attack with the pooled AUROC (Mann–Whitney over all real-target rows, as the report pools them).

    python experiments/record_centring.py runs/sweep/regime_math_prepared_e8_seed2 [...] [--json experiments/results/record_centring.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from leakaudit.metrics import auroc
from leakaudit.report import load_run


def centred_aurocs(real: pd.DataFrame) -> pd.DataFrame:
    """Per attack label of `real` (load_run(...).real: label, record_id, domain, score, is_member): rows, the
    pooled AUROC of the scores and of the scores less each (domain, record)'s mean over the targets that scored it.
    Rows with a NaN score are left out of both."""
    out = []
    for label, g in real.dropna(subset=["score"]).groupby("label"):
        centred = g["score"] - g.groupby(["domain", "record_id"])["score"].transform("mean")
        y = g["is_member"].astype(bool).to_numpy()
        out.append({"attack": label, "rows": len(g), "auroc": auroc(y, g["score"].to_numpy()),
                    "auroc_record_centred": auroc(y, centred.to_numpy())})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results = {}
    for run in args.runs:
        table = centred_aurocs(load_run(run).real)
        results[str(run)] = table.round(4).to_dict(orient="records")
        print(f"== {run}\n{table.round(3).to_string(index=False)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
