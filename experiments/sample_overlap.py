"""docs/results.md: none of its numbers (whether fresh samples reproduce a member's privileged text).

Do the target's fresh samples reproduce a member's privileged text? A model-free diagnostic over a finished run.

Leaky reads membership from log-prob gaps on the target's own samples. The most direct form of the leak it looks
for is the sample itself: a student pulled toward a teacher that saw the record's reference text may write that
text when given the record's prompt. For every target (the null target too) and candidate, this computes the
mean over the stored fresh trajectories of difflib's similarity ratio between the decoded sample and the start of
the record's privileged text (cut to the sample's length in characters), and reports the AUROC of that score for
the target's labels and the mean similarity of members and non-members. No model is run; the tokenizer decodes.

It uses the privileged text, which an auditor holding the candidate records has, so it is a legitimate (if crude)
attack; here it is a diagnostic of WHERE the signal is, not one of the registered attacks.

    python experiments/sample_overlap.py runs/sweep/code_body_m8_e30_balanced_full_rkl [--json out.json]
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import numpy as np
import pandas as pd
from transformers import AutoTokenizer

from _run_cli import main_over_runs
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MembershipPlan
from leakaudit.metrics import roc_metrics
from leakaudit.rundir import RunDir
from leakaudit.signals.store import load_trajectories


def similarity(sample: str, reference: str) -> float:
    """difflib ratio in [0, 1] between `sample` and the first len(sample) characters of `reference`."""
    return difflib.SequenceMatcher(None, sample, reference[:max(len(sample), 1)], autojunk=False).ratio()


def analyse(run_root: Path, n_boot: int) -> dict:
    run = RunDir(run_root)
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    views = plan.views()
    tok = AutoTokenizer.from_pretrained(str(run.model(views[0].target)))
    rows = []
    for view in views:
        labels = plan.labels(view.label_source)
        for rid, trajs in load_trajectories(run.fresh(view.target)).items():
            sims = [similarity(tok.decode(t, skip_special_tokens=True), records[rid].privileged) for t in trajs]
            rows.append({"target": view.target, "null_check": view.null_check, "record_id": rid,
                         "label": labels[rid], "score": float(np.mean(sims))})
    df = pd.DataFrame(rows)
    out = {"run": str(run_root), "per_target": {}, "pooled_real": None}
    for target, g in df.groupby("target"):
        m = roc_metrics(g.label.values, g.score.values, n_boot=n_boot, seed=0)
        out["per_target"][target] = {"auroc": round(m["auroc"], 3), "auroc_lo": round(m["auroc_lo"], 3),
                                     "auroc_hi": round(m["auroc_hi"], 3),
                                     "mean_sim_members": round(float(g[g.label].score.mean()), 3),
                                     "mean_sim_nonmembers": round(float(g[~g.label].score.mean()), 3)}
    real = df[~df.null_check]
    m = roc_metrics(real.label.values, real.score.values, n_boot=n_boot, seed=0, clusters=real.record_id.values)
    out["pooled_real"] = {k: round(m[k], 3) for k in ("auroc", "auroc_lo", "auroc_hi")}
    print(json.dumps(out, indent=1), flush=True)
    return out


if __name__ == "__main__":
    main_over_runs(analyse, __doc__)
