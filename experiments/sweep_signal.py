"""docs/results.md: the runs behind its tables (the sweep's points, regime_*), and README's default-study table.

Sweep: which study settings make membership visible, and to which attacks?

Each sweep point is a full study (records → plan → teacher → students → signals → attacks → metrics) run by
the library with `--set`-style overrides on top of a preset, in its own run directory under runs/sweep/.
Finished points are reused (run-study is resumable), so the sweep can be interrupted and re-run.

    python experiments/sweep_signal.py --points teacher_self,teacher_prepared      # on top of preset quick
    python experiments/sweep_signal.py --list

Writes experiments/results/sweep.json and prints a markdown table: per point and domain, AUROC [95% CI] and TPR@1%FPR
of Leaky and of the best attack of each family (fresh-trajectory, fixed-text, blind), plus the null target's
Leaky AUROC.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from leakaudit.config import load_config
from leakaudit.study import Study

# name -> overrides on top of the preset (quick: the first default study's settings). One factor at a time,
# except the last two points, which combine what the earlier ones showed was needed.
CODE_ONLY = "data.domains={code: {source: humaneval}}"
# The regime: a background set shared by every student, a few passes, 8 students (3 matched OUT references
# per record), the subset-balanced keep matrix, full-vocabulary reverse KL. One teacher per point: `restated` (answers
# from its context in another surface form) or `prepared` (copies its context). regime_code_prepared = preset default.
REGIME = ["data.n_population=16", "data.n_teacher_records=64", "data.n_background=32", "data.n_candidates=24",
          "plan.n_students=8", "plan.keep_design=balanced_subsets", "training.loss=full_rkl", "training.epochs=3",
          "training.batch_size=8", "training.max_new_tokens=48", "signals.sampling.max_new_tokens=48"]
POINTS: dict[str, list[str]] = {
    "regime_code_restated": [CODE_ONLY, *REGIME, "teacher.kind=restated"],
    "regime_code_prepared": [CODE_ONLY, *REGIME, "teacher.kind=prepared"],
    "regime_math_restated": ["data.domains={math: {source: champ}}", *REGIME, "teacher.kind=restated"],
    "regime_math_prepared": ["data.domains={math: {source: champ}}", *REGIME, "teacher.kind=prepared"],
    "regime_medical_restated": ["data.domains={medical: {source: medical}}", *REGIME, "teacher.kind=restated"],
    "regime_medical_prepared": ["data.domains={medical: {source: medical}}", *REGIME, "teacher.kind=prepared"],
    # both reference designs in one run: the matched OUT students as above, and 4 offline references
    # trained on the background + 12 of 24 reference-only records (never a candidate), attacks labelled '@offline'.
    # The reference slice follows every other one in the seeded shuffle, so the students' records and seeds, hence
    # the matched design's scores, are regime_medical_prepared's.
    "regime_medical_prepared_offline4": ["data.domains={medical: {source: medical}}", *REGIME, "teacher.kind=prepared",
                                         "plan.n_offline_references=4", "data.n_reference_records=24"],
    # recipes that train harder inside the regime, to be chosen on a development seed (--seed 1) and then reported on
    # a fresh one (no tuning on the reported records): more passes, a larger step
    "regime_code_prepared_e8": [CODE_ONLY, *REGIME, "teacher.kind=prepared", "training.epochs=8"],
    # run E8 (seed 1): at 8 passes every attack detects membership, the fixed-text RMIA (0.748) above Leaky (0.683);
    # the copying teacher pulls the students onto the very tokens the fixed-text attacks score, so
    # the restated teacher at 8 passes (at 3 its students ended farther from it, run R) is the next development point
    "regime_code_restated_e8": [CODE_ONLY, *REGIME, "teacher.kind=restated", "training.epochs=8"],
    # run RE8 (seed 1): the restated teacher at 8 passes lowers every attack (Leaky 0.539, RMIA 0.625), RMIA still
    # strongest; the rule picks neither for a new fresh seed. Does E8's pattern (8 passes: every attack detects, the
    # fixed-text RMIA best) hold on a second domain? Math, copying teacher, 8 passes, development seed next.
    "regime_math_prepared_e8": ["data.domains={math: {source: champ}}", *REGIME, "teacher.kind=prepared",
                                "training.epochs=8"],
    # ME8's point with 16 fresh trajectories per record instead of 4 (signals only: nothing the students train on
    # changes, so --models-from the 4-trajectory run of the same seed reuses its teacher and students). On the
    # development seed Leaky's pooled AUROC still rose at the 4th trajectory (bench/trajectory_curve.py: 0.662, 0.687,
    # 0.712, 0.725 for k = 1..4); 16 is the count the README named before that curve was read
    "regime_math_prepared_e8_t16": ["data.domains={math: {source: champ}}", *REGIME, "teacher.kind=prepared",
                                    "training.epochs=8", "signals.sampling.n_per_record=16"],
    # ME8's point with 8 offline references beside the matched ones (plan.n_offline_references; each trains on the
    # background + 12 of 24 reference-only records). Its teacher and students are ME8's (--models-from: the reference
    # slice comes after every other one, so nothing else changes), so the matched design must reproduce ME8 exactly.
    # Why: on stored signals Leaky rises with the number of matched references on every e8 run (bench/reference_curve.py:
    # math development seed 0.663, 0.708, 0.725 for m = 1, 2, 3) where RMIA hardly moves (0.640, 0.639, 0.648); 8
    # offline references give the curve to m = 8 on the development seed
    "regime_math_prepared_e8_offline8": ["data.domains={math: {source: champ}}", *REGIME, "teacher.kind=prepared",
                                         "training.epochs=8", "plan.n_offline_references=8",
                                         "data.n_reference_records=24"],
    "regime_code_prepared_lr3e-4": [CODE_ONLY, *REGIME, "teacher.kind=prepared", "training.learning_rate=3.0e-4"],
    # run L1 (seed 1) found lr 3e-4 blowing every student up in its first steps (teacher KL 1 -> 7-19, rollouts of
    # 1-4 tokens; canonical-body log p -1.6 -> -5.6 nats/token at the end): the same step reached over 6 warm-up steps
    # (a third of the 18): run W1, README; it moved nothing beyond a redraw (whether it stopped the collapse was lost)
    "regime_code_prepared_lr3e-4_warmup6": [CODE_ONLY, *REGIME, "teacher.kind=prepared",
                                            "training.learning_rate=3.0e-4", "training.warmup_steps=6"],
    # math with a token cap a solution can finish in more often: champ's worked solutions run to a median of 216 tokens
    # (10th / 90th percentile 109 / 336, the 72 records of regime_math_prepared_seed1), so at 48 every rollout and
    # sample is an opening and none reaches its answer (0/72 fit in 48 tokens); 128 covers 14/72 whole and costs ~2.7x the rollout
    # time. Chosen from the realism card (at-cap fraction, final-answer match), which reads no membership label.
    "regime_math_prepared_tok128": ["data.domains={math: {source: champ}}", *REGIME, "teacher.kind=prepared",
                                    "training.max_new_tokens=128", "signals.sampling.max_new_tokens=128"],
    # the first hand experiment inside the pipeline: a teacher prepared on 96 records, 8 members per student
    "code_teacher96_m8_e30": [CODE_ONLY, "teacher.kind=prepared", "data.n_teacher_records=96", "data.n_candidates=16",
                              "training.epochs=30", "training.batch_size=8", "training.max_new_tokens=48"],
    # the same with the subset-balanced keep matrix (reference identity independent of the label)
    "code_teacher96_m8_e30_balanced": [CODE_ONLY, "teacher.kind=prepared", "data.n_teacher_records=96",
                                       "data.n_candidates=16", "training.epochs=30", "training.batch_size=8",
                                       "training.max_new_tokens=48", "plan.keep_design=balanced_subsets"],
    # the same with HumanEval records whose privileged text is the canonical BODY and whose student is asked for the
    # body only (before: the whole function, so trajectories restated the docstring; README)
    "code_body_m8_e30_balanced": [CODE_ONLY, "teacher.kind=prepared", "data.n_teacher_records=96",
                                  "data.n_candidates=16", "training.epochs=30", "training.batch_size=8",
                                  "training.max_new_tokens=48", "plan.keep_design=balanced_subsets"],
    # ... trained with the full-vocabulary reverse KL instead of the sampled-token estimator (the default preset from
    # the first sweep until the regime)
    "code_body_m8_e30_balanced_full_rkl": [CODE_ONLY, "teacher.kind=prepared", "data.n_teacher_records=96",
                                           "data.n_candidates=16", "training.epochs=30", "training.batch_size=8",
                                           "training.max_new_tokens=48", "plan.keep_design=balanced_subsets",
                                           "training.loss=full_rkl"],
    "mathmed_teacher48_m8_e20": ["data.domains={math: {source: champ}, medical: {source: medical}}",
                                 "teacher.kind=prepared", "data.n_teacher_records=48", "teacher.prep={epochs: 2}",
                                 "data.n_candidates=16", "training.epochs=20", "training.batch_size=8",
                                 "training.max_new_tokens=48"],
    "code_prepared_e30": [CODE_ONLY, "teacher.kind=prepared", "training.epochs=30"],
    "code_prepared_e30_full_rkl": [CODE_ONLY, "teacher.kind=prepared", "training.epochs=30", "training.loss=full_rkl"],
    "code_self_e30": [CODE_ONLY, "teacher.kind=self", "training.epochs=30"],
    "teacher_self": ["teacher.kind=self"],
    "teacher_prepared": ["teacher.kind=prepared"],
    "prepared_epochs_x2": ["teacher.kind=prepared", "training.epochs=24"],
    "prepared_lr_x3": ["teacher.kind=prepared", "training.learning_rate=3.0e-4"],
    "prepared_full_rkl": ["teacher.kind=prepared", "training.loss=full_rkl"],
    "prepared_lora16": ["teacher.kind=prepared", "training.lora_rank=16", "training.learning_rate=1.0e-3"],
    "prepared_sample_t07": ["teacher.kind=prepared", "signals.sampling.temperature=0.7"],
    "prepared_sample_16tok": ["teacher.kind=prepared", "signals.sampling.max_new_tokens=16"],
}
# quick has since gained offline references (every preset reads Leaky against them); the points ran without them
# unless they say otherwise, so each point starts from quick as it was swept (same config, same config hash)
QUICK_AS_SWEPT = ["plan.n_offline_references=0", "data.n_reference_records=0"]
POINTS = {name: [*QUICK_AS_SWEPT, *overrides] for name, overrides in POINTS.items()}


SIGNALS_ONLY = ("name", "out_root", "signals", "attacks", "metrics")
"""Config sections no model of a run depends on: two runs that differ only in these train the same teacher and
students (same records, plan, seeds, recipe), so one's models may serve the other (--models-from)."""
ADDS_OFFLINE_REFERENCES = (("plan", "n_offline_references"), ("data", "n_reference_records"))
"""Keys that add offline references and leave the teacher and the students as they were: the reference-only records
are the slice after every other one in each domain's seeded shuffle (leakaudit.membership.reference_slice), so the
candidates, population, teacher and background records, each student's members and every model id's seed are the
same. A linked model the new plan would train otherwise (an offline reference of the source, on another slice)
fails the students stage's record check before anything is trained."""


def _differences(old, new) -> list[str]:
    """Top-level sections in which two study configs differ outside SIGNALS_ONLY and ADDS_OFFLINE_REFERENCES."""
    old, new = old.to_dict(), new.to_dict()
    for section, key in ADDS_OFFLINE_REFERENCES:
        for d in (old, new):
            d[section] = {k: v for k, v in d[section].items() if k != key}
    return sorted(k for k in set(old) | set(new) if k not in SIGNALS_ONLY and old.get(k) != new.get(k))


def model_config_differences(source_yaml: Path, cfg) -> list[str]:
    """Top-level sections of the study config in `source_yaml` (a finished run's study.yaml) that differ from `cfg`
    (the resolved config of the run to be made) outside SIGNALS_ONLY and ADDS_OFFLINE_REFERENCES; [] = the source's
    teacher and students are this run's. The source is read through load_config, so a key added since it ran with
    its neutral default (config.py's NEUTRAL_DEFAULTS, e.g. plan.n_null_students = 1) counts as equal, as it does
    for the run's own hash."""
    return _differences(load_config(source_yaml), cfg)


def link_models(source_root: Path, cfg) -> dict:
    """Hard-link a finished run's teacher and students (models/) into the new run directory `cfg.run_dir`, after
    checking that the two configs differ only as model_config_differences allows (else SystemExit naming the
    sections). The teacher and students stages then find every model DONE and skip it (each student's records are
    still checked against the plan), so only what the new config adds runs. A target that has models already (a
    resumed run) is left as it is. Hard links, not copies: 5 GB per run here, and neither run rewrites a finished
    model in place. Returns what the results JSON records: the source directory and its config hash."""
    import os
    import shutil

    source_cfg = load_config(source_root / "study.yaml")  # gives back the hash the source run recorded
    differs = _differences(source_cfg, cfg)
    if differs:
        raise SystemExit(f"--models-from {source_root}: its config differs from this point's in {differs}, not only "
                         f"in {list(SIGNALS_ONLY)} or by added offline references; its models are not this run's")
    if not (source_root / "models").is_dir():
        raise SystemExit(f"--models-from {source_root}: no models/ there")
    dest = Path(cfg.run_dir) / "models"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source_root / "models", dest, copy_function=os.link)
    return {"models_from": str(source_root), "models_from_config_hash": source_cfg.hash()}


def headline(root: Path) -> list[dict]:
    """Per domain, metrics.json's headline (leakaudit.per_target.headline_table): each method's attack with its mean
    per-target AUROC [95% CI] and the paired Δ Leaky − it, plus the null target's mean per-target AUROC of Leaky."""
    mj = json.loads((root / "metrics.json").read_text())
    nulls = {(r["domain"], r["label"]): r for r in mj.get("mean_target_auroc") or [] if r["null_check"]}
    rows: dict[str, dict] = {}
    for h in mj.get("headline") or []:
        row = rows.setdefault(h["domain"], {"domain": h["domain"]})
        row[h["method"]] = f"{h['attack']} {h['mean per-target AUROC [95% CI]']} {h['Δ Leaky − this [95% CI]']}".strip()
        if h["method"] == "Leaky" and (h["domain"], h["attack"]) in nulls:
            row["null_leaky_auroc"] = round(float(nulls[(h["domain"], h["attack"])]["auroc"]), 3)
    return list(rows.values())


def _fmt(r) -> str:
    return f"{r.auroc:.3f} [{r.auroc_lo:.3f}, {r.auroc_hi:.3f}] tpr1%={r['tpr@0.01']:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", default=",".join(POINTS), help="comma-separated sweep points")
    ap.add_argument("--preset", default="quick",
                    help="the preset the points modify (quick: the settings the sweep started from)")
    ap.add_argument("--set", dest="extra", action="append", default=[], help="extra override for every point")
    ap.add_argument("--out", default="experiments/results/sweep.json")
    ap.add_argument("--seed", type=int, default=None,
                    help="the study seed (plan, training, sampling); its run directories and result keys are named "
                         "<point>_seed<N> so a development seed never shares a directory with the reported one")
    ap.add_argument("--models-from", default=None,
                    help="a finished run directory whose config differs from the point's only in signals / attacks / "
                         "metrics or by added offline references: its teacher and students are hard-linked in and "
                         "not retrained (one point only)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for k, v in POINTS.items():
            print(f"{k:28s} {' '.join(v)}")
        return
    if args.models_from and "," in args.points:
        raise SystemExit("--models-from serves one point")
    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.is_file() else {}
    extra = [*args.extra, *([f"seed={args.seed}"] if args.seed is not None else [])]
    for point in args.points.split(","):
        name = point if args.seed is None else f"{point}_seed{args.seed}"
        cfg = load_config(preset=args.preset, overrides=[*POINTS[point], *extra, f"name={name}", "out_root=runs/sweep"])
        start = time.time()
        study = Study(cfg, log=lambda m: print(m, flush=True))
        reused = link_models(Path(args.models_from), study.cfg) if args.models_from else {}
        root = study.run_all()
        # study.cfg: bf16_autocast resolved on this machine, the config the run directory is hashed by
        results[name] = {"overrides": POINTS[point] + extra, "config_hash": study.cfg.hash(),
                         "bf16_autocast": study.cfg.training.bf16_autocast,
                         "wall_s": round(time.time() - start, 1), **reused, "rows": headline(root)}
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(results, indent=2))
        print(json.dumps(results[name], indent=2), flush=True)
    print("\n| point | domain | Leaky | best fresh | best fixed | blind | null Leaky | Leaky, offline refs "
          "| as published: Leaky / strongest / strongest fresh |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, res in results.items():
        for r in res["rows"]:
            print(f"| {name} | {r['domain']} | {r['leaky']} | {r.get('best_fresh', '')} | {r.get('best_fixed', '')} "
                  f"| {r.get('best_blind', '')} | {r['null_leaky_auroc']} | {r.get('leaky_offline', '')} "
                  f"| {r.get('paper', '')} |")


if __name__ == "__main__":
    main()
