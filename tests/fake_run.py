"""A synthetic but correctly shaped run directory for metrics / report / notebook tests (no models involved).

Layout: domains math and code, two real targets each (`<domain>-0`, `<domain>-1`) and one null target
(`null-math`, labels drawn independently of the scores), 40 records per target, half members.
Attacks: leaky (fresh family, strong planted signal), loss and min_k (fixed family, weak signal),
blind_text (blind family, no signal).  Two loss scores per target are NaN.
`write_fake_literalness` adds the literalness files (teacher kind, teacher_literalness.json,
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


# ---- literalness: hand-made files with known values for the report's teacher section -------------
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


# ---- realism card: a plan, students' meta.json and fresh signals with known values ------------------
REALISM_CANDIDATES = 20
"""Per domain: records r000-r019 are candidates, r020-r027 population, r028-r039 background (in meta.json only)."""
REALISM_POPULATION = 8
REALISM_SAMPLES = {
    # record -> (samples, log p per token under the target, under the base); members of math-0: even records
    "math-0": {"math-r000": (["The answer is 0.", "The answer is 0."], -0.2, -1.2),
               "math-r001": (["So 1 + 0 = 1", "I think \\boxed{7}"], -0.5, -1.0),
               "math-r002": (["The answer is 2.", "answer: 5"], -0.2, -1.2),
               "math-r003": (["", "The answer is 4"], -0.5, -1.0)},
    "null-math": {"math-r000": (["The answer is 0."], -0.3, -0.3),
                  "math-r001": (["The answer is 9."], -0.3, -0.3)},
    "code-0": {"code-r000": (["Solution 0 by {secret}"], -0.1, None),  # the privileged text itself
               "code-r001": (["    return 1\n"], -0.4, None)},
}
"""Stored fresh trajectories: math-0 and null-math scored by the target and the base, code-0 by the target only;
code-1 and math-1 have none (a partial run)."""
REALISM_TRAINING = {
    # model -> (role, trained candidates, population trained, epochs, steps, meta n_background)
    "math-0": ("student", "even", False, 3, 9, 12), "math-1": ("student", "odd", False, 2, None, None),
    "code-0": ("student", "even", False, 1, 4, None), "code-1": ("student", "odd", False, 1, None, None),
    "null-math": ("null", "none", True, 3, 12, None),
}


def _ids(domain: str, lo: int, hi: int) -> list[str]:
    return [f"{domain}-r{i:03d}" for i in range(lo, hi)]


def write_fake_realism(root: str | Path, tokenizer, *, secret: str = "SECRET-PATIENT-4711") -> Path:
    """Over a write_fake_run directory: a keep-matrix plan (2 students per domain, math-0 / code-0 IN for the even
    candidates, math-1 / code-1 for the odd ones, null-math on population only), models/<id>/meta.json per
    REALISM_TRAINING (each student also trains on the 12 background records r028-r039), the fresh signals of
    REALISM_SAMPLES (texts tokenized with `tokenizer`, constant per-token log-probs; math-0 at temperature 1,
    null-math at 0.7) and `base_model: smollm2-135m` in study.yaml."""
    from leakaudit.membership import MembershipPlan
    from leakaudit.signals.store import save_logp, save_trajectories

    rd = RunDir(Path(root))
    with open(rd.config, "a", encoding="utf-8") as f:
        f.write("base_model: smollm2-135m\n")
    cands = {d: _ids(d, 0, REALISM_CANDIDATES) for d in ("math", "code")}
    pop = {d: _ids(d, REALISM_CANDIDATES, REALISM_CANDIDATES + REALISM_POPULATION) for d in ("math", "code")}
    background = {d: _ids(d, REALISM_CANDIDATES + REALISM_POPULATION, N_PER_TARGET) for d in ("math", "code")}
    rows, models = [], {}
    for model_id, (role, which, on_pop, epochs, steps, n_bg) in REALISM_TRAINING.items():
        domain = TARGETS[model_id]
        models[model_id] = {"domain": domain, "role": role}
        trained = [r for i, r in enumerate(cands[domain])
                   if (which == "even" and i % 2 == 0) or (which == "odd" and i % 2 == 1)]
        rows += [(r, model_id, r in trained) for r in cands[domain]]
        trained = trained + (pop[domain] if on_pop else []) + background[domain]
        meta = {"kind": "opd_student", "model_id": model_id, "record_ids": trained, "n_records": len(trained),
                "epochs": epochs, **({"steps": steps} if steps is not None else {}),
                **({"n_background": n_bg} if n_bg is not None else {})}
        rd.model(model_id).mkdir(parents=True, exist_ok=True)
        write_json(rd.model(model_id) / "meta.json", meta)
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    MembershipPlan("keep_matrix", 7, {"n_students": 2}, models, cands, pop, table).save(rd.plan_dir)
    for target, per_record in REALISM_SAMPLES.items():
        fresh = rd.fresh(target)
        ids = list(per_record)
        toks = [[tokenizer.encode(s.replace("{secret}", secret), add_special_tokens=False) for s in per_record[r][0]]
                for r in ids]
        temperature = 0.7 if target.startswith("null") else 1.0
        save_trajectories(fresh, ids, toks, {"config": {"n_per_record": len(toks[0]), "temperature": temperature,
                                                        "top_p": 1.0, "max_new_tokens": 16, "seed": 3}})
        for model_id, k in ((target, 1), ("base", 2)):
            if per_record[ids[0]][k] is None:
                continue
            save_logp(fresh, model_id, {r: [np.full(len(t), per_record[r][k]) for t in tt] for r, tt in zip(ids, toks)})
    return rd.root
