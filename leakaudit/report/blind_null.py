"""The blind text baseline's permutation null, and the report's warning when members and non-members differ as text.

`blind_text` (attacks/blind_text.py) fits a bag-of-words classifier on the candidates' texts and the target's labels
(out of fold). If the texts alone separate members from non-members, the split leaks through the text, and every
attack on the fixed text can score that difference instead of memorisation. Its AUROC is not compared with 0.5:
with few records an out-of-fold classifier is biased BELOW 0.5 under labels that carry nothing (each fold's
training set is short of the held-out record's class; 0.384 on average at 16 candidates,
experiments/results/blind_text_null_16cands.json), so the comparison is with its own null, computed here as
experiments/blind_text_null.py does but in the pipeline: the whole cross-validated classifier is refitted on
relabelled candidates and its AUROC recomputed.

Relabelling (what the design could have produced): within a domain one uniform permutation of the candidates is
applied to the columns of the keep matrix, i.e. every target's labels at once (label'_t(r) = label_t(pi(r))).
Each target keeps its member count, each record its number of IN targets, and a balanced design stays balanced;
a target's labels alone are then a uniform draw of its member count among its candidates (experiments/blind_text_null.py's
draw). Targets whose candidate sets differ are relabelled separately (an audit: within its one target). Domains
are relabelled independently. Null targets are left out (they borrow a real target's labels: same texts, same
labels, the same classifier). Levels as in metrics.csv: per target, pooled per domain, pooled over all.

Rule (`blind_text_verdict`): warn when the permutation p-value of a domain's pooled row is below 0.05 / k, the k
domain rows tested (Bonferroni; k = 1 for one domain). Not "CI lower bound above 0.5": that bound is compared with
0.5, which is not what no signal looks like here (the null sits near 0.38 at 16 candidates, so a real text
difference can leave the CI straddling 0.5), and the percentile bootstrap holds the out-of-fold scores fixed,
ignoring that they were fitted with the labels. The permutation test reruns the whole procedure under the
design's own relabellings, so its level is exact under the hypothesis that the text says nothing about
membership. Per-target p-values are shown but do not trigger the warning (4-8 correlated tests per domain).
Only when the null cannot be computed (no records.jsonl, or refitting does not reproduce the stored scores) does
the warning fall back to the CI rule, and it says so.

`blind_text_null.csv` (docs/contracts.md): one row per (blind label, level, domain, target) of real targets.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from leakaudit.metrics import POOLED, auroc, permutation_null

BLIND_ATTACK = "blind_text"
BLIND_NULL_PERMUTATIONS = 100
"""Random relabellings when there are more distinct ones than this (else every one is enumerated), in a study's
report stage. Each one refits the 5-fold classifier on every target, which is most of what a report costs. The
smallest sampled p-value is 1/101, below the 0.05 warning level (and 0.05/3 for three domains)."""
REPORT_PERMUTATIONS = 50
"""`leakaudit report`'s default relabellings (more with --n-perm): 100 took 75 s of the command's 85 s on a stored
8-target run on 2 busy cores (bench/results/report_time.json). The smallest sampled p-value, 1/51, is below the
warning level of one or two domains; `report_permutations` raises the count where a run has more."""
ALPHA = 0.05
REFIT_ATOL = 1e-6
"""Refitting blind_text with the real labels must reproduce the stored scores to this (probabilities)."""
WARNING_TEXT = "members and non-members differ as text; every fixed-text attack's AUROC is suspect"
COLUMNS = ["label", "attack", "params", "level", "domain", "target", "n_targets", "n_pos", "n_neg", "auroc",
           "auroc_lo", "auroc_hi", "null_mean", "null_sd", "null_lo", "null_hi", "p_value", "n_null", "exact",
           "seed", "permutation", "status"]


def report_permutations(n_domains: int, alpha: float = ALPHA) -> int:
    """`leakaudit report`'s default relabellings for a run of `n_domains` tested domains: REPORT_PERMUTATIONS, or the
    fewest whose smallest sampled p-value, 1/(n+1), is below the warning level alpha/k where that is more."""
    return max(REPORT_PERMUTATIONS, math.ceil(max(n_domains, 1) / alpha))


def blind_text_null(scores: pd.DataFrame, texts: dict[str, str] | None, *, n_perm: int = BLIND_NULL_PERMUTATIONS,
                    seed: int = 0, tick: Callable[[], None] | None = None) -> pd.DataFrame:
    """The permutation null of every blind_text label in `scores` (normalised, labelled score rows).

    texts: record_id -> the text blind_text saw (the record's `privileged`, from records.jsonl); None = not
    available. Rows in COLUMNS order; auroc_lo / auroc_hi are left NaN (`attach_ci` copies them from metrics).
    status "ok", or why the null was not computed (its columns NaN then). tick() is called after each relabelling.
    """
    name = scores["attack_name"] if "attack_name" in scores else scores["attack"]
    blind = scores[(name == BLIND_ATTACK) & ~scores["null_check"].astype(bool) & scores["is_member"].notna()]
    frames = [_one_label(g, texts, n_perm=n_perm, seed=seed, tick=tick) for _, g in blind.groupby("label", sort=True)]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS))[COLUMNS]


def _one_label(rows: pd.DataFrame, texts: dict[str, str] | None, *, n_perm: int, seed: int,
               tick: Callable[[], None] | None = None) -> pd.DataFrame:
    from attacks import AttackInputs, run_attack
    from leakaudit.attack_errors import user_errors_from_attacks

    rows = rows.assign(is_member=rows["is_member"].astype(bool))
    targets = {key: g for key, g in rows.groupby(["domain", "target"], sort=True)}   # row order kept within each
    domains = sorted({d for d, _ in targets})
    params = {key: json.loads(g["params"].iloc[0]) for key, g in targets.items()}
    stored = {key: g["score"].to_numpy(np.float64) for key, g in targets.items()}
    labels = {key: g["is_member"].to_numpy(bool) for key, g in targets.items()}
    rids = {key: g["record_id"].tolist() for key, g in targets.items()}

    # groups: per domain, targets with the same candidates share one relabelling of those candidates
    groups: list[dict] = []
    for domain in domains:
        by_set: dict[tuple, list] = {}
        for key in (k for k in targets if k[0] == domain):
            by_set.setdefault(tuple(sorted(rids[key])), []).append(key)
        for recs, keys in by_set.items():
            pos = {r: i for i, r in enumerate(recs)}
            matrix = np.zeros((len(keys), len(recs)), dtype=bool)
            for t, key in enumerate(keys):
                matrix[t, [pos[r] for r in rids[key]]] = labels[key]
            types, codes = np.unique(matrix.T, axis=0, return_inverse=True)
            groups.append({"domain": domain, "keys": keys, "types": types, "codes": codes.reshape(-1),
                           "rows": {key: np.array([pos[r] for r in rids[key]]) for key in keys}})

    def fit(key, y: np.ndarray) -> np.ndarray:
        inputs = AttackInputs(record_ids=rids[key], texts=[texts[r] for r in rids[key]], labels=y)
        with user_errors_from_attacks():
            return run_attack(BLIND_ATTACK, inputs, params[key])

    keys = list(targets)
    levels = ([("target", k[0], k[1]) for k in keys] + [("domain", d, POOLED) for d in domains]
              + [("all", POOLED, POOLED)])

    def stats_of(y: dict, s: dict) -> list[float]:
        out = [auroc(y[k], s[k]) for k in keys]
        for d in domains:
            ks = [k for k in keys if k[0] == d]
            out.append(auroc(np.concatenate([y[k] for k in ks]), np.concatenate([s[k] for k in ks])))
        out.append(auroc(np.concatenate([y[k] for k in keys]), np.concatenate([s[k] for k in keys])))
        return out

    observed = stats_of(labels, stored)
    status = _why_not(targets, texts, n_perm)
    memo: dict[tuple, np.ndarray] = {}
    if status == "ok":
        for k in keys:
            memo[(k, labels[k].tobytes())] = fit(k, labels[k])
        diff = max(float(np.max(np.abs(memo[(k, labels[k].tobytes())] - stored[k]))) for k in keys)
        if diff > REFIT_ATOL:
            status = (f"not computed: refitting blind_text on records.jsonl does not reproduce the stored scores "
                      f"(max |diff| {diff:.2g}); the null would be of another procedure")
    null = None
    if status == "ok":

        def statistic(arranged: list[np.ndarray]) -> list[float]:
            y, s = {}, {}
            for g, codes in zip(groups, arranged):
                for t, key in enumerate(g["keys"]):
                    y[key] = g["types"][codes, t][g["rows"][key]]
                    memo_key = (key, y[key].tobytes())
                    if memo_key not in memo:  # a label vector seen before is the same fit (seeded folds)
                        memo[memo_key] = fit(key, y[key])
                    s[key] = memo[memo_key]
            if tick is not None:
                tick()
            return stats_of(y, s)

        null = permutation_null(statistic, [g["codes"] for g in groups], observed, n_perm=n_perm, seed=seed)
        lo, hi = null.interval(0.95)

    first = rows.iloc[0]
    out = []
    for i, (level, domain, target) in enumerate(levels):
        ks = [k for k in keys if (level == "all" or k[0] == domain) and (level != "target" or k[1] == target)]
        y = np.concatenate([labels[k] for k in ks])
        gs = [g for g in groups if any(k in g["keys"] for k in ks)]
        scheme = ("labels within target" if all(len(g["keys"]) == 1 for g in gs)
                  else "records within domain, all its targets at once")
        row = {"label": first["label"], "attack": BLIND_ATTACK, "params": first["params"], "level": level,
               "domain": domain, "target": target, "n_targets": len(ks), "n_pos": int(y.sum()),
               "n_neg": int((~y).sum()), "auroc": observed[i], "auroc_lo": np.nan, "auroc_hi": np.nan,
               "null_mean": np.nan, "null_sd": np.nan, "null_lo": np.nan, "null_hi": np.nan, "p_value": np.nan,
               "n_null": 0, "exact": False, "seed": seed, "permutation": scheme, "status": status}
        if null is not None:
            row.update(null_mean=float(null.null[:, i].mean()), null_sd=float(null.null[:, i].std()),
                       null_lo=float(lo[i]), null_hi=float(hi[i]), p_value=float(null.p_value[i]),
                       n_null=null.n, exact=null.exact)
        out.append(row)
    return pd.DataFrame(out, columns=COLUMNS)


def _why_not(targets: dict, texts: dict[str, str] | None, n_perm: int) -> str:
    if n_perm <= 0:
        return "not computed: 0 permutations asked"
    if texts is None:
        return "not computed: no records.jsonl (the texts blind_text saw)"
    missing = sorted({r for g in targets.values() for r in g["record_id"]} - set(texts))
    if missing:
        return f"not computed: {len(missing)} records missing from records.jsonl (e.g. {missing[0]})"
    return "ok"


def attach_ci(null: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Copy auroc_lo / auroc_hi of the matching real-target metrics rows into the null table."""
    if null.empty or metrics.empty:
        return null
    key = ["label", "level", "domain", "target"]
    m = metrics[~metrics["null_check"].astype(bool)][key + ["auroc_lo", "auroc_hi"]]
    merged = null.drop(columns=["auroc_lo", "auroc_hi"]).merge(m, on=key, how="left")
    return merged[COLUMNS]


def blind_text_verdict(null: pd.DataFrame, alpha: float = ALPHA) -> dict:
    """Whether the report warns. Tested rows: the pooled per-domain rows; a row with a null warns when its p-value
    is below alpha / k (k = the number of tested rows: Bonferroni), a row without one when its CI lower bound is
    above 0.5 (the fallback, named in the message). Returns {warning, rule, message, flagged: [domain labels]}."""
    rule = (f"Rule: warn when a domain's blind text permutation p-value is below {alpha:g}/k (Bonferroni over the k "
            "domain rows; the null refits blind_text on relabelled candidates), or, where no null could be "
            "computed, when its CI lower bound is above 0.5")
    rows = null[null["level"] == "domain"] if not null.empty else null
    if rows.empty:
        return {"warning": False, "rule": rule, "flagged": [],
                "message": "blind_text did not run on labelled targets: the split is not checked by text."}
    k = len(rows)
    has_null = rows["status"] == "ok"
    bad = (has_null & (rows["p_value"] < alpha / k)) | (~has_null & (rows["auroc_lo"] > 0.5))
    parts = [_describe(r, alpha / k) for _, r in rows.iterrows()]
    flagged = [f"{r['domain']} ({r['label']})" for _, r in rows[bad].iterrows()]
    if bool(bad.any()):
        message = (f"WARNING: {WARNING_TEXT}. The blind text baseline separates members from non-members in "
                   f"{', '.join(flagged)}. " + " ".join(parts))
    else:
        message = "Blind text baseline consistent with no text difference between members and non-members. " + \
                  " ".join(parts)
    return {"warning": bool(bad.any()), "rule": rule, "flagged": flagged, "message": message}


def _describe(r: pd.Series, threshold: float) -> str:
    ci = f" [{r['auroc_lo']:.3f}, {r['auroc_hi']:.3f}]" if pd.notna(r.get("auroc_lo")) else ""
    head = f"{r['domain']}: AUROC {r['auroc']:.3f}{ci}"
    if r["status"] != "ok":
        return f"{head}; no permutation null ({r['status']}), so the CI rule applies (lower bound > 0.5)."
    kind = "all" if r["exact"] else "random"
    return (f"{head}, permutation null 95% [{r['null_lo']:.3f}, {r['null_hi']:.3f}] (mean {r['null_mean']:.3f}; "
            f"{int(r['n_null'])} {kind} relabellings, seed {int(r['seed'])}), p = {r['p_value']:.3g} "
            f"(warning below {threshold:.3g}).")


def read_blind_null(path: Path) -> pd.DataFrame | None:
    """blind_text_null.csv as written by build_report, or None when absent."""
    if not Path(path).is_file():
        return None
    df = pd.read_csv(path, keep_default_na=True)
    for col in ("params", "status", "permutation", "label", "domain", "target"):
        if col in df:
            df[col] = df[col].astype(object).where(df[col].notna(), "")
    return df
