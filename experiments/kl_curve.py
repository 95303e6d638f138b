"""docs/results.md: none of its numbers (whether OPD moves one student toward its teacher on math and medical).

One student, one domain: does OPD training move it toward its teacher, and does that help held-out records?

Prepares a teacher on population records (or uses the frozen base with --teacher self), trains one student by
OPD on `--members` records for `--epochs` epochs, then prints the teacher-KL curve per epoch (from the ledger)
and the mean per-token log-likelihood of the reference text on held-out records under the base vs the student.
With --kl-samples N (> 0) it also estimates the teacher KL on fresh samples (experiments/member_kl.py's KL_hat, N
samples per record) for the base and the trained student, on members and on held-out records: a fall on held-out
records means training generalises (the student behaves like the privileged teacher on records it never saw);
the member/held-out difference is the record-specific part.

    python experiments/kl_curve.py --source champ --members 4 --epochs 30 --out runs/kl_math

Records: a seeded shuffle of the source split into members / held-out / population (disjoint).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import numpy as np

from leakaudit.data.sources import load_source
from leakaudit.prompting import reference_text_ids, student_prompt_ids
from leakaudit.signals.backend import SamplingConfig, open_backend
from member_kl import sampled_teacher_kl
from shadow_models import OPDConfig, train_student
from shadow_models.teacher_prep import TeacherPrepConfig, prepare_teacher


def ref_logps(backend, tokenizer, records) -> list[float]:
    """Per record, the mean per-token log p (nats, <= 0) of its reference text after its student prompt (the fixed
    text LOSS scores; leakaudit.signals.stages.score_fixed scores the same pairs into a file)."""
    scores = backend.score([student_prompt_ids(tokenizer, r) for r in records],
                           [reference_text_ids(tokenizer, r) for r in records])
    return [float(np.mean(s.logp)) for s in scores]


def mean_ref_logp(backend, tokenizer, records) -> float:
    """Mean over records of `ref_logps`."""
    return float(np.mean(ref_logps(backend, tokenizer, records)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="champ")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--heldout", type=int, default=8)
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--teacher", choices=("prepared", "self"), default="prepared")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--base-model", default="smollm2-135m")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--loss", default="sampled_rkl", help="sampled_rkl | full_rkl | jsd")
    ap.add_argument("--kl-samples", type=int, default=0, help="fresh samples per record for the KL_hat check")
    args = ap.parse_args()

    from leakaudit.models import load_tokenizer

    tok = load_tokenizer(args.base_model)
    pool = [r for r in load_source(args.source, seed=args.seed)
            if len(tok(r.privileged)["input_ids"]) <= 384]
    order = np.random.default_rng(args.seed).permutation(len(pool))
    pool = [pool[i] for i in order]
    members = pool[:args.members]
    heldout = pool[args.members:args.members + args.heldout]
    population = pool[args.members + args.heldout:args.members + args.heldout + args.population]
    teacher = None
    if args.teacher == "prepared":
        teacher = str(prepare_teacher(args.base_model, population, args.out / "teacher",
                                      TeacherPrepConfig(seed=args.seed),
                                      forbidden_ids=[r.record_id for r in members + heldout]))
    cfg = OPDConfig(epochs=args.epochs, batch_size=args.members, learning_rate=args.lr, loss=args.loss,
                    max_new_tokens=args.max_new_tokens, seed=args.seed)
    name = f"student_{args.loss}_lr{args.lr:g}"
    student = train_student(args.base_model, members, args.out / name, cfg, teacher_model=teacher)
    ledger = [json.loads(line) for line in (student / "ledger.jsonl").read_text().splitlines()]
    by_epoch: dict[int, list[float]] = {}
    for row in ledger:
        by_epoch.setdefault(row["epoch"], []).append(row["teacher_kl"])
    curve = [round(float(np.mean(by_epoch[e])), 4) for e in sorted(by_epoch)]
    result = {
        "source": args.source, "teacher": args.teacher, "members": args.members, "epochs": args.epochs,
        "learning_rate": args.lr, "loss": args.loss,
        "teacher_kl_by_epoch": curve,
    }
    kl_cfg = SamplingConfig(n_per_record=args.kl_samples, temperature=cfg.temperature, top_p=cfg.top_p,
                            max_new_tokens=args.max_new_tokens, seed=args.seed) if args.kl_samples > 0 else None
    with contextlib.ExitStack() as stack:
        t = stack.enter_context(open_backend("transformers", teacher or args.base_model)) if kl_cfg else None
        for who, ref in (("base", args.base_model), ("student", str(student))):
            with open_backend("transformers", ref) as s:
                for split, recs in (("heldout", heldout), ("member", members)):
                    result[f"{split}_ref_logp_{who}"] = round(mean_ref_logp(s, tok, recs), 4)
                if kl_cfg:
                    for split, recs in (("members", members), ("heldout", heldout)):
                        kl = sampled_teacher_kl(s, t, tok, recs, kl_cfg, cfg.teacher_template)
                        result[f"kl_hat_{split}_{who}"] = round(float(np.nanmean(kl)), 4)
    if kl_cfg:
        result["kl_hat_samples_per_record"] = args.kl_samples
    (args.out / f"kl_curve_{name}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
