"""docs/results.md, At 3 passes: members' body only 0.026 nats/token more likely; 99% of math samples at the cap.

Does OPD training work on a finished study? Reads a run directory; trains and loads nothing.

For each domain:
- the rollouts' length by epoch, and the fraction that ran to max_new_tokens without ending;
- the teacher-KL curve on members: mean over the domain's students of the per-epoch mean of the ledger's
  `teacher_kl` (sampled-token estimate of KL(student || teacher) on the student's own completions);
- answer quality before vs after, as held-out reference log-likelihood: the mean per-token log p of each
  record's privileged reference text given the student prompt, under the base model and under each student,
  on the student's NON-member candidates (records it never trained on), and on its members for contrast.
  (A rising held-out likelihood means training generalises rather than only memorising; code is never
  executed, so this is the measure used for every domain.)

    python experiments/training_evidence.py runs/default [--json experiments/results/training_evidence.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from leakaudit.membership import MembershipPlan
from leakaudit.rundir import RunDir
from leakaudit.signals.store import load_fixed


def by_epoch(ledger_path: Path, value) -> list[float]:
    """Per epoch, the mean over its steps of value(ledger row)."""
    rows = [json.loads(line) for line in ledger_path.read_text().splitlines() if line.strip()]
    epochs: dict[int, list[float]] = {}
    for r in rows:
        epochs.setdefault(int(r["epoch"]), []).append(float(value(r)))
    return [float(np.mean(epochs[e])) for e in sorted(epochs)]


def kl_by_epoch(ledger_path: Path) -> list[float]:
    return by_epoch(ledger_path, lambda r: r["teacher_kl"])


def at_cap_by_epoch(ledger_path: Path, cap: int) -> list[float]:
    """Per epoch, the fraction of rollouts that ran to `cap` new tokens without ending."""
    return by_epoch(ledger_path, lambda r: np.mean([n >= cap for n in r["completion_lengths"]]))


def _mean_curve(curves: list[list[float]]) -> list[float]:
    n_ep = min(len(c) for c in curves)
    return [round(float(x), 4) for x in np.mean([c[:n_ep] for c in curves], axis=0)]


def evidence(run_root: Path) -> dict:
    run = RunDir(run_root)
    plan = MembershipPlan.load(run.plan_dir)
    base = load_fixed(run.fixed("base"))
    out = {}
    for domain in sorted(plan.candidates):
        students = plan.models_of(domain, "student")
        ledgers = [run.model(m) / "ledger.jsonl" for m in students]
        cap = json.loads((run.model(students[0]) / "meta.json").read_text())["config"]["max_new_tokens"]
        kl = _mean_curve([kl_by_epoch(p) for p in ledgers])
        # rollout lengths: a student whose completions all run to the cap has stopped ending its answers
        length = _mean_curve([by_epoch(p, lambda r: np.mean(r["completion_lengths"])) for p in ledgers])
        at_cap = _mean_curve([at_cap_by_epoch(p, cap) for p in ledgers])
        held_base, held_student, mem_base, mem_student = [], [], [], []
        for m in students:
            fx = load_fixed(run.fixed(m))
            labels = plan.labels(m)
            for rid, is_member in labels.items():
                pair = (float(np.mean(base[rid].logp)), float(np.mean(fx[rid].logp)))
                (mem_base if is_member else held_base).append(pair[0])
                (mem_student if is_member else held_student).append(pair[1])
        out[domain] = {
            "teacher_kl_by_epoch": kl,
            "rollout_tokens_by_epoch": length,
            "rollouts_at_cap_by_epoch": at_cap,
            "max_new_tokens": cap,
            "heldout_ref_logp_base": round(float(np.mean(held_base)), 4),
            "heldout_ref_logp_students": round(float(np.mean(held_student)), 4),
            "member_ref_logp_base": round(float(np.mean(mem_base)), 4),
            "member_ref_logp_students": round(float(np.mean(mem_student)), 4),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    ev = evidence(args.run_dir)
    for domain, e in ev.items():
        curve = " ".join(f"{x:.3f}" for x in e["teacher_kl_by_epoch"])
        print(f"{domain}: teacher KL by epoch: {curve}")
        print(f"  rollout tokens by epoch: {' '.join(f'{x:.1f}' for x in e['rollout_tokens_by_epoch'])}; at the "
              f"{e['max_new_tokens']}-token cap: {' '.join(f'{x:.2f}' for x in e['rollouts_at_cap_by_epoch'])}")
        print(f"  held-out reference log p/token: base {e['heldout_ref_logp_base']:.3f} -> students "
              f"{e['heldout_ref_logp_students']:.3f}; members: base {e['member_ref_logp_base']:.3f} -> "
              f"students {e['member_ref_logp_students']:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(ev, indent=2))


if __name__ == "__main__":
    main()
