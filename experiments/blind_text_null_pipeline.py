"""docs/results.md: none of its numbers; the report's blind text check for a config, computed without training.

The report's blind text check (leakaudit/report/blind_null.py) for a study config, without training anything.

blind_text sees only the candidates' texts and each target's labels, so its scores, and the permutation null the
report computes from them, follow from the records and the plan alone: this prepares a study in memory (records,
plan; nothing is written), runs blind_text on every real target as the attacks stage does, and computes the
null with the report's code. For the default preset at seed 0 this is runs D, E and G's blind baseline (same
records, plan and fold seed); at seed 1 the previous default's seed-1 run's.

    python experiments/blind_text_null_pipeline.py [--preset default] [--set seed=1 ...] [--n-perm 200]
        [--metrics-seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pandas as pd

from attacks import AttackInputs
from leakaudit.config import load_config
from leakaudit.metrics import normalise_scores
from leakaudit.report.blind_null import blind_text_null, blind_text_verdict
from leakaudit.scoring import attack_rows, attack_specs
from leakaudit.study import Study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--n-perm", type=int, default=200)
    ap.add_argument("--metrics-seed", type=int, default=None, help="default: the config's metrics.seed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:  # prepare() writes nothing; out_root only keeps it off runs/
        cfg = load_config(preset=args.preset, overrides=[*args.overrides, f"out_root={tmp}"])
        study = Study(cfg, progress=False, log=lambda m: None)
        study.prepare()
    plan, records = study.plan(), study.records()
    specs = [a for a in attack_specs(cfg.attacks) if a.name == "blind_text"]
    k_in, k_out = plan.reference_counts(cfg.plan.n_matched_references)
    frames = []
    for view in plan.views():
        if view.null_check:
            continue
        labels = plan.labels(view.label_source)
        ids = plan.matched_references(view, k_in, k_out).record_ids  # the attacks stage's record order
        inputs = AttackInputs(record_ids=list(ids), texts=[records[r].privileged for r in ids],
                              labels=[labels[r] for r in ids])
        frames.append(attack_rows(inputs, specs, target=view.target, domain=view.domain))
    scores = normalise_scores(pd.concat(frames, ignore_index=True))
    seed = cfg.metrics.seed if args.metrics_seed is None else args.metrics_seed
    texts = {r: rec.privileged for r, rec in records.items()}
    start = time.process_time()
    null = blind_text_null(scores, texts, n_perm=args.n_perm, seed=seed)
    cpu = time.process_time() - start
    verdict = blind_text_verdict(null)
    cols = ["level", "domain", "target", "auroc", "null_mean", "null_lo", "null_hi", "p_value", "n_null", "status"]
    print(null[cols].to_string(index=False))
    print(verdict["message"])
    print(f"null: {cpu:.1f} CPU s")
    if args.json:
        out = {"preset": args.preset, "overrides": args.overrides, "config_seed": cfg.seed, "metrics_seed": seed,
               "n_perm": args.n_perm, "cpu_seconds": round(cpu, 1), "warning": verdict["warning"],
               "message": verdict["message"],
               "rows": json.loads(null.drop(columns=["auroc_lo", "auroc_hi"]).to_json(orient="records"))}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
