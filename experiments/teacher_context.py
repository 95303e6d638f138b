"""docs/results.md, What did not work: a prepared teacher copies its context (log p −0.001 with it, −0.369 without).

How much does a teacher use its privileged context?

For records of a finished run (candidates of each domain), and each teacher (the base model, and the run's
prepared teacher when it exists), report per-token mean log-probs:
- reference text: log p_T(privileged | student prompt) vs log p_T(privileged | teacher prompt with context);
- on-policy: on completions sampled from the base student (student prompt only), the context effect
  E_y[log p_T(y | x, c) − log p_T(y | x)] — the record-specific pull OPD can transmit to a student. If it is
  ≈ 0 the teacher gives the student nothing about the record to memorise.

    python experiments/teacher_context.py runs/default --n 6 [--json experiments/results/teacher_context.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from leakaudit.data.records import read_jsonl
from leakaudit.io import is_done
from leakaudit.membership import MembershipPlan
from leakaudit.models import load_tokenizer
from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE, reference_text_ids, student_prompt_ids, teacher_prompt_ids
from leakaudit.rundir import RunDir
from leakaudit.signals.backend import SamplingConfig, make_backend, open_backend


def measure(run_root: Path, n: int, base_model: str, max_new_tokens: int = 48) -> dict:
    run = RunDir(run_root)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    tok = load_tokenizer(base_model)
    teachers = {"base": base_model}
    if is_done(run.teacher):
        teachers["prepared"] = str(run.teacher)
    sampler = make_backend("transformers", base_model)
    out: dict = {}
    for domain in sorted(plan.candidates):
        recs = [records[r] for r in plan.candidates[domain][:n]]
        student_prompts = [student_prompt_ids(tok, r) for r in recs]
        teacher_prompts = [teacher_prompt_ids(tok, r, DEFAULT_TEACHER_TEMPLATE) for r in recs]
        refs = [reference_text_ids(tok, r) for r in recs]
        samples = sampler.sample(student_prompts, SamplingConfig(n_per_record=2, max_new_tokens=max_new_tokens,
                                                                 seed=0))
        flat = [(i, y) for i, ys in enumerate(samples) for y in ys if len(y)]
        out[domain] = {}
        for name, ref in teachers.items():
            with open_backend("transformers", ref) as t:
                no_ctx = t.score(student_prompts, refs)
                ctx = t.score(teacher_prompts, refs)
                y_no = t.score([student_prompts[i] for i, _ in flat], [y for _, y in flat])
                y_ctx = t.score([teacher_prompts[i] for i, _ in flat], [y for _, y in flat])
                out[domain][name] = {
                    "ref_logp_without_context": round(float(np.mean([s.logp.mean() for s in no_ctx])), 4),
                    "ref_logp_with_context": round(float(np.mean([s.logp.mean() for s in ctx])), 4),
                    "onpolicy_context_effect": round(float(np.mean([a.logp.mean() - b.logp.mean()
                                                                    for a, b in zip(y_ctx, y_no)])), 4),
                    "n_records": len(recs), "n_samples": len(flat),
                }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--n", type=int, default=6, help="candidates per domain")
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = measure(args.run_dir, args.n, args.base_model)
    for domain, by_teacher in res.items():
        for name, r in by_teacher.items():
            print(f"{domain:8s} {name:9s} ref log p/token: no context {r['ref_logp_without_context']:.3f}, "
                  f"with context {r['ref_logp_with_context']:.3f}; on-policy context effect "
                  f"{r['onpolicy_context_effect']:+.3f} nats/token")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
