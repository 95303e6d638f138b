"""docs/results.md, What did not work: a self-distillation teacher leaves nothing record-specific (teacher KL).

Teacher KL on members vs non-members of the same trained student. Reads a finished run.

For every target of the run (students and null students) and every candidate record, take the target's stored
fresh trajectories y ~ student(. | x) and the target's own stored log-probs, score the same tokens under the run's
teacher WITH the record's privileged context (prompt + privileged, the teacher template of training), and
estimate the per-token reverse KL on the student's own samples:

    KL_hat(record) = mean over trajectories and tokens of [log p_student(y_t | x, y_<t) - log p_teacher(y_t | x, c, y_<t)]

(the same sampled-token estimate the training ledger's `teacher_kl` reports). OPD minimises this on members only,
so a student that learnt something record-specific has a lower KL on members than on candidates it never saw;
a student that only learnt the domain's format lowers both alike. Reported per target: mean KL on members,
on non-members, and the AUROC of -KL_hat for members vs non-members (not an attack: it needs the teacher and the
privileged context; it shows where the leak comes from). The null target has no members among candidates.

With --base, the same estimate for the untrained base student (its own samples, same sampling settings and
seed as the run's fresh trajectories) on every candidate: the "before" of training. A student whose KL on
NON-members is far below the base's learnt to behave like the privileged teacher on records it never saw
(training generalises); the member/non-member difference is the record-specific part.

    python experiments/member_kl.py runs/sweep/code_teacher96_m8_e30 [--json experiments/results/member_kl.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from leakaudit.data.records import read_jsonl
from leakaudit.io import is_done
from leakaudit.membership import MembershipPlan
from leakaudit.models import load_tokenizer
from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE, student_prompt_ids, teacher_prompt_ids
from leakaudit.rundir import RunDir
from leakaudit.signals.backend import SamplingConfig, open_backend
from leakaudit.signals.store import load_logp, load_sampling_meta, load_trajectories


def sampled_teacher_kl(student, teacher, tok, recs, cfg: SamplingConfig, template: str) -> list[float]:
    """KL_hat per record (len(recs) floats): `student` samples `cfg.n_per_record` completions of each record's
    student prompt, both backends score them (the teacher with prompt + privileged), and KL_hat is the mean over
    trajectories of the mean per-token log p_student - log p_teacher. Records whose samples are all empty: nan."""
    prompts = [student_prompt_ids(tok, r) for r in recs]
    samples = student.sample(prompts, cfg)
    flat = [(i, list(map(int, y))) for i, ys in enumerate(samples) for y in ys if len(y)]
    own = student.score([prompts[i] for i, _ in flat], [y for _, y in flat])
    t = teacher.score([teacher_prompt_ids(tok, recs[i], template) for i, _ in flat], [y for _, y in flat])
    per_record: dict[int, list[float]] = {}
    for (i, _), a, b in zip(flat, own, t):
        per_record.setdefault(i, []).append(float(np.mean(a.logp - b.logp)))
    return [float(np.mean(per_record[i])) if i in per_record else float("nan") for i in range(len(recs))]


def base_kl(run: RunDir, plan: MembershipPlan, records: dict, tok, base_model: str, teacher, template: str) -> dict:
    """Per-domain mean KL_hat of the base student to the teacher on every candidate (the state before OPD)."""
    any_target = next(iter(plan.models))
    meta = load_sampling_meta(run.fresh(any_target))
    cfg = SamplingConfig(**meta["config"])
    out = {}
    with open_backend("transformers", base_model) as base:
        for domain, ids in plan.candidates.items():
            kl = sampled_teacher_kl(base, teacher, tok, [records[r] for r in ids], cfg, template)
            out[domain] = round(float(np.nanmean(kl)), 4)
            print(f"base {domain}: KL_hat {out[domain]}", flush=True)
    return out


def member_kl(run_root: Path, base_model: str, with_base: bool = False) -> dict:
    run = RunDir(run_root)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    teacher_ref = str(run.teacher) if is_done(run.teacher) else base_model
    tok = load_tokenizer(base_model)
    out: dict = {"teacher": "prepared" if is_done(run.teacher) else "base", "targets": {}}
    with open_backend("transformers", teacher_ref) as teacher:
        for target in plan.models:
            trajs = load_trajectories(run.fresh(target))
            own = load_logp(run.fresh(target), target)
            domain = plan.models[target]["domain"]
            template = json.loads((run.model(target) / "meta.json").read_text()).get("teacher_template",
                                                                                    DEFAULT_TEACHER_TEMPLATE)
            kl, member = [], []
            for rid in plan.candidates[domain]:
                ys = [y for y in trajs[rid] if len(y)]
                own_lp = [lp for y, lp in zip(trajs[rid], own[rid]) if len(y)]
                if not ys:
                    continue
                prompt = teacher_prompt_ids(tok, records[rid], template)
                t_scores = teacher.score([prompt] * len(ys), [list(map(int, y)) for y in ys])
                kl.append(float(np.mean([np.mean(a - s.logp) for a, s in zip(own_lp, t_scores)])))
                member.append(plan.is_member(target, rid))
            kl_arr, mem = np.array(kl), np.array(member, dtype=bool)
            row = {"domain": domain, "role": plan.models[target]["role"],
                   "kl_members": round(float(kl_arr[mem].mean()), 4) if mem.any() else None,
                   "kl_nonmembers": round(float(kl_arr[~mem].mean()), 4),
                   "auroc_neg_kl": round(float(roc_auc_score(mem, -kl_arr)), 3) if 0 < mem.sum() < len(mem) else None}
            out["targets"][target] = row
            print(target, row, flush=True)
        if with_base:
            template = json.loads((run.model(next(iter(plan.models))) / "meta.json").read_text()).get(
                "teacher_template", DEFAULT_TEACHER_TEMPLATE)
            out["base_kl_candidates"] = base_kl(run, plan, records, tok, base_model, teacher, template)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--base", action="store_true", help="also measure the untrained base student")
    args = ap.parse_args()
    res = member_kl(args.run_dir, args.base_model, with_base=args.base)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
