"""A synthetic but correctly shaped run directory for metrics / report / notebook tests (no models involved).

Layout: domains math and code, two real targets each (`<domain>-0`, `<domain>-1`) and one null target
(`null-math`, labels drawn independently of the scores), 40 records per target, half members.
Attacks: leaky (fresh family, strong planted signal), loss and min_k (fixed family, weak signal),
blind_text (blind family, no signal).  Two loss scores per target are NaN.
`write_fake_literalness` adds the literalness files of issue 14 (teacher kind, teacher_literalness.json,
sample_literalness.json, models/_teacher/meta.json) with known values; `write_fake_run` alone is a run made
before they existed.
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


# ---- literalness (issue 14): hand-made files with known values for the report's teacher section -------------
def fake_teacher_literalness(kind="restated"):
    """Three candidates, two domains. Over all candidates: with context (-0.0012 - 0.0030 - 0.0100) / 3 =
    -0.004733, without (-0.35 - 0.40 - 0.20) / 3 = -0.316667."""
    per = {"math-r000": {"domain": "math", "restate_rule": "math.steps", "privileged_with_context": -0.0012,
                         "privileged_without_context": -0.35, "restated_with_context": -0.8,
                         "restated_without_context": -1.1},
           "math-r001": {"domain": "math", "restate_rule": "math.steps", "privileged_with_context": -0.003,
                         "privileged_without_context": -0.4, "restated_with_context": -0.6,
                         "restated_without_context": -1.3},
           "code-r000": {"domain": "code", "restate_rule": "verbatim.x", "privileged_with_context": -0.01,
                         "privileged_without_context": -0.2, "restated_with_context": None,
                         "restated_without_context": None}}
    return {"teacher": kind, "teacher_model": "models/_teacher", "sft_target": "restated",
            "sft": {"n_records": 18, "n_records_given": 20, "restate_rules": {"math.steps": 18},
                    "left_out_record_ids": ["t-1", "t-2"]},
            "definition": "...", "records": "candidates",
            "domains": {"code": {"n_records": 1, "n_restated": 0, "privileged_with_context": -0.01,
                                 "privileged_without_context": -0.2, "restated_with_context": None,
                                 "restated_without_context": None, "privileged_context_gain": 0.19},
                        "math": {"n_records": 2, "n_restated": 2, "privileged_with_context": -0.0021,
                                 "privileged_without_context": -0.375, "restated_with_context": -0.7,
                                 "restated_without_context": -1.2, "privileged_context_gain": 0.3729}},
            "per_record": per}


def _fake_group(members, non, auroc, n_m=4, n_n=4):
    """One summary of sample_literalness.json (leakaudit.literalness._group_summary's keys)."""
    return {"n_records": n_m + n_n, "n_members": n_m, "n_non_members": n_n, "all": round((members + non) / 2, 4),
            "members": members, "non_members": non, "auroc": auroc, "restated_members": 0.2,
            "restated_non_members": 0.1}


def fake_sample_literalness():
    """Two real targets and a null target; pooled over the real ones: members 0.5811, non-members 0.4102, AUROC
    0.7656."""
    return {"similarity": "...",
            "targets": {"math-0": {"domain": "math", "null_check": False, "label_source": "math-0",
                                   **_fake_group(0.6123, 0.4012, 0.8125)},
                        "code-0": {"domain": "code", "null_check": False, "label_source": "code-0",
                                   **_fake_group(0.5499, 0.4192, 0.7188)},
                        "null-math": {"domain": "math", "null_check": True, "label_source": "math-0",
                                      **_fake_group(0.5017, 0.4983, 0.5)}},
            "pooled_real_targets": {"n_targets": 2, **_fake_group(0.5811, 0.4102, 0.7656, 8, 8)},
            "per_record": []}


def write_fake_literalness(root: str | Path, *, kind: str = "restated", teacher: bool = True, samples: bool = True,
                           meta: bool = True) -> Path:
    """Append `teacher.kind: kind` to study.yaml and write (each optional) teacher_literalness.json,
    sample_literalness.json and models/_teacher/meta.json (18 of 20 records, 2 left out) with known values."""
    rd = RunDir(Path(root))
    with open(rd.config, "a", encoding="utf-8") as f:
        f.write(f"teacher:\n  kind: {kind}\n")
    if teacher:
        write_json(rd.teacher_literalness, fake_teacher_literalness(kind))
    if samples:
        write_json(rd.sample_literalness, fake_sample_literalness())
    if meta:
        rd.teacher.mkdir(parents=True)
        write_json(rd.teacher / "meta.json", {"kind": "privileged_teacher", "sft_target": "restated",
                                              "n_records": 18, "n_records_given": 20,
                                              "left_out_record_ids": ["t-1", "t-2"]})
    return rd.root
