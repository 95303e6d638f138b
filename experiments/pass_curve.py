"""docs/results.md, With 8 passes: why 8 passes were tried (one student's members vs held out after every pass).

Does a student learn its own records as the passes go up? One student of a sweep point, scored after every epoch.

The question before an expensive run: would 8 passes (`regime_code_prepared_e8`, ~2.7x the students of a
3-pass study) make members differ from held-out candidates at all? A whole sweep point answers it with 9 students
and the signals stage; this answers the part that decides it with one student and no signals: after each epoch,
the mean per-token log p of each candidate's privileged reference text after the student prompt (the fixed text
LOSS scores), under the student as it is then, for its IN candidates (members) and its OUT ones (held out), as a
gain over the base model. A student that learns its records raises the members' gain above the held-out ones';
one that learns only the domain raises both alike. The AUROC of that gain (members vs held out, 12 + 12 for the
quick regime) is reported per epoch with a bootstrap CI: a within-student reference-ratio attack, read here only
to choose a recipe. It reads membership labels, so it belongs on a development seed (--seed 1), never on the
seed a result is reported on.

The run directory is the sweep point's own (runs/sweep/<point>_seed<N>, same config as `python
experiments/sweep_signal.py --points <point> --seed <N>`): this stops after the teacher stage, trains one student of
that run (default: its first) through `Study.train_one` with an epoch hook, and the sweep point, run later,
reuses both (its stage markers and the student's DONE). Under a constant learning rate without warm-up (the
regime's), the first k epochs of an 8-epoch student are a k-epoch student's (plan_steps draws each epoch's
order from (seed, epoch)), so epoch 3 of the curve is the 3-pass default recipe's student.

    python experiments/pass_curve.py --point regime_code_prepared_e8 --seed 1
      [--student code-s1] [--set training.bf16_autocast=false]
      [--json experiments/results/pass_curve_<point>_seed<N>_<student>.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from leakaudit.config import load_config
from leakaudit.envinfo import cpu_info
from leakaudit.locks import run_exclusively
from leakaudit.metrics import auroc, auroc_ci
from leakaudit.signals.backend import open_backend
from leakaudit.signals.hf_backend import HFBackend
from leakaudit.study import Study
from kl_curve import ref_logps
from sweep_signal import POINTS
from training_evidence import at_cap_by_epoch, kl_by_epoch


def epoch_row(epoch: int, logp: list[float], base: list[float], is_member: list[bool], seconds: float) -> dict:
    """Members vs held out after `epoch` (0-based) from per-record log p under the student and the base."""
    y = np.asarray(is_member, dtype=bool)
    lp, gain = np.asarray(logp), np.asarray(logp) - np.asarray(base)
    lo, hi = auroc_ci(y, gain, n_boot=2000, seed=0)
    return {
        "epoch": epoch + 1,
        "member_ref_logp": round(float(lp[y].mean()), 4),
        "heldout_ref_logp": round(float(lp[~y].mean()), 4),
        "member_gain_over_base": round(float(gain[y].mean()), 4),
        "heldout_gain_over_base": round(float(gain[~y].mean()), 4),
        "member_minus_heldout_gain": round(float(gain[y].mean() - gain[~y].mean()), 4),
        "auroc_gain": round(auroc(y, gain), 4), "auroc_gain_ci": [round(lo, 4), round(hi, 4)],
        "auroc_logp": round(auroc(y, lp), 4),
        "score_seconds": round(seconds, 1),
        "ref_logp_per_record": [round(x, 5) for x in logp],  # in the order of the result's "candidates"
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--point", default="regime_code_prepared_e8")
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--seed", type=int, default=1, help="the development seed (never the reported one)")
    ap.add_argument("--student", default=None, help="model id (default: the run's first student)")
    ap.add_argument("--set", dest="extra", action="append", default=[], help="extra override, as in sweep_signal")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    name = f"{args.point}_seed{args.seed}"
    extra = [*args.extra, f"seed={args.seed}"]
    cfg = load_config(preset=args.preset, overrides=[*POINTS[args.point], *extra, f"name={name}",
                                                     "out_root=runs/sweep"])
    started = time.time()
    study = Study(cfg, log=lambda m: print(m, flush=True))
    root = study.run_all(until="teacher")
    teacher_s = time.time() - started
    plan, records, tok = study.plan(), study.records(), study.tokenizer
    domain = sorted(plan.candidates)[0]
    model_id = args.student or plan.models_of(domain, "student")[0]
    labels = plan.labels(model_id)
    cands = [records[r] for r in sorted(labels)]
    is_member = [labels[r.record_id] for r in cands]
    with open_backend("transformers", cfg.base_model, trust_remote_code=cfg.trust_remote_code) as base:
        base_logp = ref_logps(base, tok, cands)
    rows = [epoch_row(-1, base_logp, base_logp, is_member, 0.0)]  # epoch 0: the base itself, gain 0

    def score_epoch(epoch: int, model) -> None:
        t0, was_training = time.time(), model.training
        with torch.no_grad():
            logp = ref_logps(HFBackend.from_model(model), tok, cands)  # from_model sets eval mode
        model.train(was_training)
        rows.append(epoch_row(epoch, logp, base_logp, is_member, time.time() - t0))
        print(json.dumps(rows[-1]), flush=True)

    train_started = time.time()
    with run_exclusively(root):
        study.train_one(model_id, epoch_hook=score_epoch)
    train_s = time.time() - train_started
    ledger = root / "models" / model_id / "ledger.jsonl"
    result = {
        "what": __doc__.split("\n")[0],
        "command": f"python experiments/pass_curve.py --point {args.point} --preset {args.preset} --seed {args.seed}"
                   + "".join(f" --set {x}" for x in args.extra),
        "run_dir": str(root), "config_hash": study.cfg.hash(), "domain": domain, "student": model_id,
        # the study's own config, bf16_autocast resolved on this machine (cfg says 'auto'; the run's hash is of this)
        "bf16_autocast": study.cfg.training.bf16_autocast, "cpu": cpu_info(),
        "candidates": [{"record_id": r.record_id, "member": m} for r, m in zip(cands, is_member)],
        "members": int(sum(is_member)), "held_out": int(len(is_member) - sum(is_member)),
        "training_records": len(plan.members(model_id)), "epochs": cfg.training.epochs,
        "learning_rate": cfg.training.learning_rate, "lr_schedule": cfg.training.lr_schedule,
        "warmup_steps": cfg.training.warmup_steps,
        "teacher_kl_by_epoch": [round(x, 4) for x in kl_by_epoch(ledger)],
        "rollouts_at_cap_by_epoch": [round(x, 4) for x in at_cap_by_epoch(ledger, study.cfg.training.max_new_tokens)],
        "by_epoch": rows,
        "seconds": {"until_teacher": round(teacher_s, 1), "student_with_scoring": round(train_s, 1)},
    }
    out = args.json or Path(f"experiments/results/pass_curve_{name}_{model_id}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
