"""A synthetic but correctly shaped run directory for metrics / report / notebook tests (no models involved).

Layout: domains math and code, two real targets each (`<domain>-0`, `<domain>-1`) and one null target
(`null-math`, labels drawn independently of the scores), 40 records per target, half members.
Attacks: leaky (fresh family, strong planted signal), loss and min_k (fixed family, weak signal),
blind_text (blind family, no signal).  Two loss scores per target are NaN.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from leakaudit.io import write_json, write_text
from leakaudit.rundir import RunDir

ATTACKS = {"leaky": ("fresh", 2.5), "loss": ("fixed", 0.6), "min_k": ("fixed", 0.4), "blind_text": ("blind", 0.0)}
TARGETS = {"math-0": "math", "math-1": "math", "code-0": "code", "code-1": "code", "null-math": "math"}
N_PER_TARGET = 40


def fake_scores(seed: int = 0) -> pd.DataFrame:
    """scores.parquet rows: record_id, target, domain, attack, params, family, score, is_member, null_check."""
    rng = np.random.default_rng(seed)
    rows = []
    for target, domain in TARGETS.items():
        null = target.startswith("null")
        member = np.arange(N_PER_TARGET) % 2 == 0
        for attack, (family, signal) in ATTACKS.items():
            score = rng.normal(size=N_PER_TARGET) + (0.0 if null else signal) * member
            if attack == "loss":
                score[[1, 2]] = np.nan
            params = json.dumps({"slope": 0.1} if attack == "leaky" else {})
            for i in range(N_PER_TARGET):
                rows.append({"record_id": f"{domain}-r{i:03d}", "target": target, "domain": domain,
                             "attack": attack, "params": params, "family": family, "score": float(score[i]),
                             "is_member": bool(member[i]), "null_check": null})
    return pd.DataFrame(rows)


def write_fake_run(root: str | Path, *, seed: int = 0, secret: str = "SECRET-PATIENT-4711") -> Path:
    """Write study.yaml, env.json, records.jsonl, scores.parquet and leak_map.json; `secret` is planted in
    the privileged text of records, in the config's examples and in the leak map tokens."""
    run = RunDir(Path(root))
    run.root.mkdir(parents=True, exist_ok=True)
    write_text(run.config, "study: fake\nseed: 7\ndomains: [math, code]\nn_targets_per_domain: 2\n"
                           "attacks: [leaky, loss, min_k, blind_text]\n"
                           f"examples:\n  - prompt: What is 2+2?\n    privileged: 'Worked: {secret} says 4'\n")
    write_json(run.env, {"python": "3.11", "torch": "fake", "seed": 7, "git": "deadbeef", "device": "cpu"})
    with open(run.records, "w", encoding="utf-8") as f:
        for domain in ("math", "code"):
            for i in range(N_PER_TARGET):
                f.write(json.dumps({"record_id": f"{domain}-r{i:03d}", "domain": domain,
                                    "prompt": f"Question {i}?", "privileged": f"Solution {i} by {secret}",
                                    "answer": str(i), "source": "fake", "meta": {}}) + "\n")
    fake_scores(seed).to_parquet(run.scores, index=False)
    tokens = ["The", " patient", " ", secret, " has", " fever", " and", " takes", " 500", "mg", "."]
    gaps = [0.0, -0.3, 0.1, 2.5, 0.2, 1.4, -0.1, 0.3, 1.9, 0.8, 0.0]
    write_json(run.leak_map, {"record_id": "math-r000", "target": "math-0", "domain": "math",
                              "prompt": "Question 0?",
                              "trajectories": [{"tokens": tokens, "gaps": gaps},
                                               {"tokens": tokens[:6], "gaps": [g / 2 for g in gaps[:6]]}]})
    return run.root
