"""docs/results.md: none of its numbers (Leaky with the same references for every record: offline references' idea).

Would Leaky see membership if every record of a target were compared with the SAME references? Reads finished runs.

In a keep-matrix study a record's matched OUT reference is one of the other students, and which one depends on
the record; students differ from one another by large per-model offsets on the target's samples, so that choice
adds noise (and, under an unbalanced design, a spurious signal: experiments/reference_confound.py). An *offline*
reference is trained on population records only, never on any candidate: it is OUT for every candidate, so
every record of a target is compared with the same model and a per-model offset is common to all of them.

Each run's null student is such a model: the same OPD recipe on n_candidates/2 population records. This script
scores every real target's stored fresh trajectories under the null student (into a scratch copy, the run
directory is not modified) and recomputes, per run, pooled over the real targets (cluster bootstrap over
records, as the report does):
- leaky_matched: Leaky with the study's matched OUT student reference (what the report shows);
- leaky_offline: Leaky with the null student as the one reference;
- gap_offline: the same without rectification (slope 1, i.e. fresh_gap_max with that reference);
- leaky_base: Leaky with the untrained base model as the reference;
- fresh_loss: the target's own mean log p of its samples (no reference).
The null student itself is not attacked here (it would be its own reference).

Caveat measured on the first three default runs (experiments/results/offline_reference_runs_ABC.json): in runs B and C the
null student had collapsed into emitting only newlines (its teacher KL rose 1.26 -> 1.87 while the sampled-token
loss went to 0; leakaudit.report.health), so there it is a poor reference; in the first run of that recipe it was healthy. All three gave
leaky_offline 0.48-0.52.

    python experiments/offline_reference.py runs/sweep/code_teacher96_m8_e30_balanced [more runs] \
        [--json experiments/results/offline_reference.json]
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from attacks import run_attack
from attacks.leaky import LeakyParams
from _run_cli import main_over_runs
from leakaudit.assemble import build_inputs
from leakaudit.config import load_config
from leakaudit.data.records import read_jsonl
from leakaudit.membership import MembershipPlan
from leakaudit.metrics import roc_metrics, tpr_key
from leakaudit.rundir import RunDir
from leakaudit.signals.backend import open_backend
from leakaudit.signals.stages import score_fresh
from leakaudit.signals.store import load_logp

SCRATCH = "bench_offline_reference"


def score_with_offline(run: RunDir, targets: list[str], offline_id: str) -> dict[str, Path]:
    """Copy each target's trajectories to a scratch directory and score them under `offline_id`, once."""
    dirs = {}
    with open_backend("transformers", str(run.model(offline_id))) as backend:
        for target in targets:
            scratch = run.root / SCRATCH / target
            scratch.mkdir(parents=True, exist_ok=True)
            for name in ("trajectories.npz", "sampling.json"):
                if not (scratch / name).exists():
                    shutil.copy2(run.fresh(target) / name, scratch / name)
            n = score_fresh(backend, offline_id, scratch)
            print(f"{run.root.name} {target}: scored {n} tokens under {offline_id}", flush=True)
            dirs[target] = scratch
    return dirs


def analyse(run_root: Path, n_boot: int) -> dict:
    run = RunDir(run_root)
    cfg = load_config(run_root / "study.yaml")
    plan = MembershipPlan.load(run.plan_dir)
    records = {r.record_id: r for r in read_jsonl(run.records)}
    views = [v for v in plan.views() if not v.null_check]
    offline = {v.domain: plan.models_of(v.domain, "null")[0] for v in views}
    scratch = {}
    for domain in sorted(set(offline)):
        scratch.update(score_with_offline(run, [v.target for v in views if v.domain == domain], offline[domain]))
    rows = []
    for view in views:
        k_in, k_out = plan.reference_counts(cfg.plan.n_matched_references)
        inputs = build_inputs(plan, view, records, k_in=k_in, k_out=k_out, fresh_dir=run.fresh,
                              fixed_path=run.fixed)
        null_lp = load_logp(scratch[view.target], offline[view.domain])
        offline_refs = [[lp[None, :] for lp in null_lp[rid]] for rid in inputs.record_ids]
        base_refs = [[lp[None, :] for lp in per] for per in inputs.fresh_base]
        variants = {
            "leaky_matched": run_attack("leaky", inputs),
            "leaky_offline": run_attack("leaky", replace(inputs, fresh_refs=offline_refs)),
            "gap_offline": run_attack("leaky", replace(inputs, fresh_refs=offline_refs), LeakyParams(slope=1.0)),
            "leaky_base": run_attack("leaky", replace(inputs, fresh_refs=base_refs)),
            "fresh_loss": run_attack("fresh_loss", inputs),
        }
        for name, score in variants.items():
            rows += [{"target": view.target, "record_id": rid, "variant": name, "score": float(s),
                      "label": bool(y)} for rid, s, y in zip(inputs.record_ids, score, inputs.labels)]
    df = pd.DataFrame(rows)
    out: dict = {"run": str(run_root), "offline_reference": offline, "pooled": {}, "per_target": {}}
    for name, g in df.groupby("variant", sort=False):
        m = roc_metrics(g.label.values, g.score.values, n_boot=n_boot, seed=0, clusters=g.record_id.values)
        out["pooled"][name] = {k: round(m[k], 3) for k in ("auroc", "auroc_lo", "auroc_hi", tpr_key(0.1))
                               if k in m} | {"n_pos": m["n_pos"], "n_neg": m["n_neg"]}
        out["per_target"][name] = {t: round(roc_metrics(h.label.values, h.score.values, n_boot=0)["auroc"], 3)
                                   for t, h in g.groupby("target")}
    print(json.dumps(out, indent=1), flush=True)
    return out



if __name__ == "__main__":
    main_over_runs(analyse, __doc__)
