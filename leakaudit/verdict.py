"""The audit's verdict: was any candidate used, and which ones? Hypothesis tests whose error rates hold.

Pure numpy / scipy over attack scores; no model code. Sign convention everywhere: higher score = more likely a
member; a NaN score (no tokens to score) counts as the lowest score (leakaudit.metrics' convention).

The null sample: records known not to have been handed to the teacher, drawn like the candidates, scored by the same
target and attack, and trained on by no reference (a record a reference trained on gets a lower Leaky / ratio score,
so it would not be exchangeable with a non-member candidate). Under H0 ("no candidate was a member") every
candidate's score is exchangeable with the null sample's.

- Global test, per attack (`global_test`): one-sided Mann-Whitney U of candidates vs the null sample
  (scipy.stats.mannwhitneyu, alternative "greater"), reported as AUROC = U / (n_cand * n_null) with the stratified
  bootstrap CI of leakaudit.metrics.auroc_ci. It assumes candidates and null sample come from one distribution
  when no candidate is a member; the blind text baseline (a text-only classifier, candidates vs null sample)
  checks that assumption.
- Per-candidate conformal p-values (`conformal_p_values`): p = (1 + #{null >= s}) / (1 + n_null), valid
  (P(p <= a) <= a) for a non-member candidate; the smallest attainable value is 1 / (1 + n_null).
- The flagged list (`flag`): Benjamini-Hochberg at level `fdr` (scipy.stats.false_discovery_control). Conformal
  p-values sharing one null sample are positively dependent (PRDS) and BH still controls the FDR: Bates, Candes,
  Lei, Romano, Sesia (2023), "Testing for outliers with conformal p-values", Ann. Statist. 51(1). Or a plain per-
  candidate threshold p <= `fpr` (each non-member flagged with probability <= fpr).
- Labelled runs (`epsilon_lower_bound`): the empirical epsilon lower bound that the flagged list's TPR / FPR imply,
  with Clopper-Pearson upper bounds on FPR and FNR (Jagielski, Ullman, Oprea 2020, "Auditing Differentially
  Private Machine Learning: How Private is Private SGD?", NeurIPS, Sec. 4; as in their released code:
  eps_lb = max(log((1 - delta - FPR_hi) / FNR_hi), log((1 - delta - FNR_hi) / FPR_hi), 0), each bound the upper
  end of the two-sided CP interval at `confidence`, so both hold at once with probability >= confidence).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from leakaudit.errors import ConfigError

DEFAULT_FDR = 0.1
"""--fdr's default: the flagged list's false discovery rate."""
PRIMARY_ATTACK = "leaky"
"""The attack the verdict's words come from, fixed before any score is seen: Leaky against references that trained
on no candidate (an audit's references are all OUT for every candidate: the offline design). The other attacks'
global tests are shown beside it, exploratory (no multiplicity correction)."""
DEFAULT_NULL_LEVEL = 0.01
"""The p-value the default null sample is sized to reach (where the data allow): null_size_for(0.01) = 99."""
BLIND_ATTACK = "blind_text"
"""The text-only baseline that checks exchangeability (candidates vs null sample as text)."""
GLOBAL_ALPHA = 0.05
"""Level at which the verdict calls the global test's p-value evidence."""
POWER = 0.8
"""Power of the detectable-effect statement (`detectable_auroc`)."""


def _finite(scores) -> np.ndarray:
    """[N] float64 with NaN -> -inf (NaN is the lowest score)."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    return np.where(np.isnan(s), -np.inf, s)


def smallest_p(n_null: int) -> float:
    """The smallest conformal p-value a null sample of n_null records allows: 1 / (1 + n_null)."""
    return 1.0 / (1 + n_null)


def null_size_for(level: float) -> int:
    """The smallest null sample whose smallest p-value is <= level: ceil(1 / level) - 1 (0.01 -> 99)."""
    if not 0 < level < 1:
        raise ConfigError(f"level must be in (0, 1), got {level}")
    return max(1, math.ceil(round(1.0 / level, 9)) - 1)


def conformal_p_values(candidates, null) -> np.ndarray:
    """p_i = (1 + #{j: null_j >= s_i}) / (1 + n_null) for each candidate score s_i; [N] float64 in (0, 1].

    Hand-written (a sorted search, two lines) because scipy has no conformal p-value with this convention; ties
    with the null count against the candidate (conservative)."""
    s, z = _finite(candidates), np.sort(_finite(null))
    if len(z) == 0:
        raise ConfigError("the null sample is empty: no p-value can be computed")
    at_or_above = len(z) - np.searchsorted(z, s, side="left")
    return (1.0 + at_or_above) / (1.0 + len(z))


def flag(p_values, *, fdr: float | None = DEFAULT_FDR, fpr: float | None = None) -> np.ndarray:
    """[N] bool: Benjamini-Hochberg at level `fdr` (scipy.stats.false_discovery_control, method 'bh'), or, with
    `fpr` given instead, p <= fpr. Exactly one of them."""
    p = np.asarray(p_values, dtype=np.float64)
    if (fdr is None) == (fpr is None):
        raise ConfigError("give one of fdr and fpr")
    level = fdr if fdr is not None else fpr
    if not 0 < level < 1:
        raise ConfigError(f"{'--fdr' if fdr is not None else '--fpr'}: must be in (0, 1), got {level}")
    if len(p) == 0:
        return np.zeros(0, dtype=bool)
    if fpr is not None:
        return p <= fpr
    return stats.false_discovery_control(p, method="bh") <= fdr


def global_test(candidates, null, *, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict:
    """One-sided Mann-Whitney test of H0 "candidates exchangeable with the null sample" against "candidates score
    higher". Returns {auroc, auroc_lo, auroc_hi, p_value, u, n_candidates, n_null}; AUROC = U / (n_c n_null)
    (ties count 1/2), its CI the stratified percentile bootstrap of leakaudit.metrics.auroc_ci (NaN with fewer
    than 2 records on a side or n_boot 0)."""
    from leakaudit.metrics import auroc_ci

    s, z = _finite(candidates), _finite(null)
    if len(s) == 0 or len(z) == 0:
        raise ConfigError(f"the global test needs candidates and a null sample, got {len(s)} and {len(z)}")
    res = stats.mannwhitneyu(s, z, alternative="greater", method="auto")
    auc = float(res.statistic) / (len(s) * len(z))
    # auroc_ci ranks; -inf (NaN scores) must stay lowest but finite for the bootstrap's rank sums
    both = np.concatenate([s, z])
    ranks = stats.rankdata(both, method="dense").astype(np.float64)
    y = np.r_[np.ones(len(s), dtype=bool), np.zeros(len(z), dtype=bool)]
    lo, hi = auroc_ci(y, ranks, n_boot=n_boot, seed=seed, level=confidence)
    return {"auroc": auc, "auroc_lo": lo, "auroc_hi": hi, "p_value": float(res.pvalue), "u": float(res.statistic),
            "n_candidates": int(len(s)), "n_null": int(len(z))}


def detectable_auroc(n_candidates: int, n_null: int, *, alpha: float = GLOBAL_ALPHA, power: float = POWER) -> float:
    """The AUROC the one-sided global test detects with probability `power` at level `alpha`, by the normal
    approximation with the H0 variance of the AUROC, (n_c + n_null + 1) / (12 n_c n_null) (Mann-Whitney):
    0.5 + (z_{1-alpha} + z_power) * sd. Capped at 1."""
    sd = math.sqrt((n_candidates + n_null + 1) / (12.0 * n_candidates * n_null))
    return min(1.0, 0.5 + (stats.norm.ppf(1 - alpha) + stats.norm.ppf(power)) * sd)


def level_warnings(n_null: int, n_candidates: int, *, fdr: float | None = None, fpr: float | None = None) -> list[str]:
    """Sentences warning that the null sample is too small for the requested level (empty when it is not)."""
    p_min = smallest_p(n_null)
    out = []
    if fpr is not None and p_min > fpr:
        out.append(f"The null sample has {n_null} records: the smallest p-value it allows is {p_min:.3g}, above "
                   f"--fpr {fpr:g}, so no candidate can be flagged; {null_size_for(fpr)} records are needed.")
    if fdr is not None:
        if p_min > fdr:
            out.append(f"The null sample has {n_null} records: the smallest p-value it allows is {p_min:.3g}, above "
                       f"--fdr {fdr:g}, so no candidate can be flagged; {null_size_for(fdr)} records are needed.")
        elif n_candidates > 1 and p_min > fdr / n_candidates:
            out.append(f"The null sample has {n_null} records (smallest p-value {p_min:.3g}): a candidate can be "
                       f"flagged at FDR {fdr:g} only together with others; flagging a single one among "
                       f"{n_candidates} needs p <= {fdr / n_candidates:.3g}, i.e. "
                       f"{null_size_for(fdr / n_candidates)} null records.")
    return out


def clopper_pearson_upper(k: int, n: int, *, confidence: float = 0.95) -> float:
    """Upper end of the two-sided Clopper-Pearson interval of k successes in n (scipy.stats.binomtest, exact);
    a one-sided bound at 1 - (1 - confidence) / 2. NaN when n == 0."""
    if n == 0:
        return float("nan")
    return float(stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact").high)


def epsilon_lower_bound(tp: int, fn: int, fp: int, tn: int, *, delta: float = 0.0,
                        confidence: float = 0.95) -> dict:
    """Empirical epsilon lower bound from one decision rule's confusion counts (members: tp + fn; non-members:
    fp + tn). An (eps, delta)-DP training forces FPR + e^eps FNR >= 1 - delta and FNR + e^eps FPR >= 1 - delta, so
    eps >= max(log((1 - delta - FPR_hi) / FNR_hi), log((1 - delta - FNR_hi) / FPR_hi), 0) with the Clopper-Pearson
    upper bounds FPR_hi, FNR_hi (Jagielski et al. 2020). Returns {epsilon_lb, delta, confidence, tpr, fpr, fpr_hi,
    fnr_hi, n_members, n_non_members}; epsilon_lb NaN without both classes."""
    n_pos, n_neg = tp + fn, fp + tn
    out = {"delta": delta, "confidence": confidence, "n_members": int(n_pos), "n_non_members": int(n_neg),
           "tpr": tp / n_pos if n_pos else float("nan"), "fpr": fp / n_neg if n_neg else float("nan")}
    if not n_pos or not n_neg:
        return {**out, "epsilon_lb": float("nan"), "fpr_hi": float("nan"), "fnr_hi": float("nan")}
    fpr_hi = clopper_pearson_upper(fp, n_neg, confidence=confidence)
    fnr_hi = clopper_pearson_upper(fn, n_pos, confidence=confidence)
    bounds = [0.0]
    for a, b in ((fpr_hi, fnr_hi), (fnr_hi, fpr_hi)):
        if 1 - delta - a > 0:  # b > 0 always: a CP upper bound is positive
            bounds.append(math.log((1 - delta - a) / b))
    return {**out, "epsilon_lb": max(bounds), "fpr_hi": fpr_hi, "fnr_hi": fnr_hi}


def audit_verdict(candidate_ids: Sequence[str], scores: Mapping[str, tuple[np.ndarray, np.ndarray]], *,
                  primary: str = PRIMARY_ATTACK, fdr: float | None = DEFAULT_FDR, fpr: float | None = None,
                  labels: np.ndarray | None = None, blind: tuple[np.ndarray, np.ndarray] | None = None,
                  null_source: str = "", n_boot: int = 1000, seed: int = 0, delta: float = 0.0) -> dict:
    """The verdict of one audit (audit.json's "verdict").

    candidate_ids: [N]; scores: attack label -> (candidate scores [N], null-sample scores [Z]); primary: the label
    the words and the flagged list come from (present in `scores`); labels: [N] bool is_member when known;
    blind: (candidates [N], null [Z]) scores of the blind text baseline, the exchangeability check.
    Keys: primary, level {kind: fdr|fpr, value}, n_candidates, n_null, null_source, smallest_p, warnings,
    global {attack: global_test}, primary_global, blind (global_test + valid) | None, candidate_ids [N],
    p_values [N], flagged [N],
    flagged_ids, detectable_auroc, evidence (bool), valid (bool), epsilon (labelled runs) | None, headline, details.
    """
    if fpr is not None:
        fdr = None
    if primary not in scores:
        raise ConfigError(f"the primary attack '{primary}' has no scores (ran: {sorted(scores)})")
    cand, null = (np.asarray(x, dtype=np.float64) for x in scores[primary])
    if len(cand) != len(candidate_ids):
        raise ConfigError(f"{len(candidate_ids)} candidate ids but {len(cand)} scores for '{primary}'")
    n, z = len(cand), len(null)
    tests = {a: global_test(c, nl, n_boot=n_boot, seed=seed) for a, (c, nl) in scores.items() if len(c) and len(nl)}
    p = conformal_p_values(cand, null)
    flagged = flag(p, fdr=fdr, fpr=fpr)
    blind_test = None
    if blind is not None and len(blind[0]) and len(blind[1]):
        blind_test = global_test(*blind, n_boot=n_boot, seed=seed)
        blind_test["valid"] = not (blind_test["auroc_lo"] > 0.5)  # NaN CI (too few records): not refuted
    valid = blind_test is None or blind_test["valid"]
    g = tests[primary]
    out = {
        "primary": primary, "level": {"kind": "fdr" if fdr is not None else "fpr",
                                      "value": fdr if fdr is not None else fpr},
        "n_candidates": n, "n_null": z, "null_source": null_source, "smallest_p": smallest_p(z),
        "warnings": level_warnings(z, n, fdr=fdr, fpr=fpr), "global": tests, "primary_global": g,
        "blind": blind_test, "valid": bool(valid), "evidence": bool(g["p_value"] < GLOBAL_ALPHA),
        "candidate_ids": [str(r) for r in candidate_ids],
        "p_values": [float(x) for x in p], "flagged": [bool(x) for x in flagged],
        "flagged_ids": [str(r) for r, f in zip(candidate_ids, flagged) if f],
        "detectable_auroc": detectable_auroc(n, z), "epsilon": None,
    }
    if labels is not None:
        y = np.asarray(labels, dtype=bool)
        tp, fp = int((flagged & y).sum()), int((flagged & ~y).sum())
        out["epsilon"] = epsilon_lower_bound(tp, int(y.sum()) - tp, fp, int((~y).sum()) - fp, delta=delta)
    out["headline"], out["details"] = verdict_sentences(out)
    return out


def _level_words(v: dict) -> str:
    lv = v["level"]
    return f"FDR {lv['value']:g}" if lv["kind"] == "fdr" else f"p <= {lv['value']:g} (per-candidate FPR)"


def _ci(t: dict) -> str:
    if np.isnan(t["auroc_lo"]):
        return f"AUROC {t['auroc']:.2f}"
    return f"AUROC {t['auroc']:.2f} [{t['auroc_lo']:.2f}, {t['auroc_hi']:.2f}]"


def verdict_sentences(v: dict) -> tuple[str, list[str]]:
    """(the headline sentence, further sentences) of a verdict dict (audit_verdict's keys)."""
    g = v["primary_global"]
    k = len(v["flagged_ids"])
    if not v["valid"]:
        b = v["blind"]
        head = (f"The test is not valid for these files: a text-only classifier tells candidates from the null "
                f"sample ({_ci(b)}), so they are not drawn alike and a difference in scores would not show use. "
                f"(Leaky: {_ci(g)}, p = {g['p_value']:.2g}.)")
    elif v["evidence"]:
        head = (f"Candidates score higher than known non-members: {_ci(g)}, p = {g['p_value']:.2g}; {k} of "
                f"{v['n_candidates']} candidates flagged at {_level_words(v)}"
                + (": " + ", ".join(v["flagged_ids"][:10]) + (" ..." if k > 10 else "") if k else "") + ".")
    else:
        power = (f"detects an AUROC of {v['detectable_auroc']:.2f} or more with {POWER:.0%} power at "
                 f"p < {GLOBAL_ALPHA:g}" if v["detectable_auroc"] < 1 else
                 f"is too small to detect even a perfect separation with {POWER:.0%} power at p < {GLOBAL_ALPHA:g}")
        head = (f"No evidence that any candidate was used (p = {g['p_value']:.2g}, {_ci(g)}); with "
                f"{v['n_candidates']} candidates and {v['n_null']} null records the audit {power}, and its smallest "
                f"per-candidate p-value is {v['smallest_p']:.2g}"
                + (f"; {k} of {v['n_candidates']} flagged at {_level_words(v)}" if k else "") + ".")
    details = [f"Primary attack, fixed in advance: {v['primary']} (references that trained on no candidate). "
               f"Global test: one-sided Mann-Whitney, candidates vs {v['n_null']} null-sample records "
               f"({v['null_source'] or 'known non-members'}); it assumes that, had no candidate been used, "
               "candidates and null sample would score alike (same distribution)."]
    b = v["blind"]
    if b is not None:
        details.append(f"Exchangeability check (blind text baseline, candidates vs null sample): {_ci(b)}"
                       + ("; consistent with candidates and null sample drawn alike." if b["valid"]
                          else "; above 0.5: the files differ as text, the test is not valid for them."))
    else:
        details.append("Exchangeability check (blind text baseline): not run.")
    details.append(f"Per-candidate p-values: conformal against the null sample, smallest possible "
                   f"{v['smallest_p']:.2g}; flagged at {_level_words(v)}.")
    details += v["warnings"]
    e = v.get("epsilon")
    if e is not None and not np.isnan(e["epsilon_lb"]):
        details.append(f"Labelled candidates: the flagged list has TPR {e['tpr']:.2f}, FPR {e['fpr']:.2f}; "
                       f"empirical epsilon lower bound {e['epsilon_lb']:.2f} (delta {e['delta']:g}, Clopper-Pearson "
                       f"at {e['confidence']:.0%}; Jagielski et al. 2020).")
    return head, details


# ---- a study: do its targets leak? -------------------------------------------------------------------------------
STUDY_PRIMARY = ("leaky@offline", "leaky")
"""A study's primary attack label, in order of preference: Leaky with offline references (which trained on no
candidate), else Leaky with matched OUT references."""


def study_verdict(scores, *, n_boot: int = 1000, seed: int = 0) -> dict | None:
    """Do a study's targets leak? Per target, the one-sided global test of its members' primary-attack scores against
    its non-members' (`global_test`); for the family of real targets a Bonferroni p-value, min(1, n * min p) (valid
    whatever the dependence between targets, which share candidates); the null targets' tests beside them (they
    trained on no candidate: their p-values should be unremarkable), and the blind text baseline per real target
    (a CI above 0.5: members and non-members differ as text, so no score difference shows leakage).

    scores: scores.parquet's rows (record_id, target, attack, score, is_member, null_check). Returns None without a
    labelled primary attack; else {primary, targets [{target, domain, null_check, ...global_test}], n_targets,
    n_rejected, family_p, null_targets [...], blind [{target, ...global_test, valid}], valid, evidence, headline}."""
    label = next((a for a in STUDY_PRIMARY if (scores.attack == a).any()), None)
    if label is None:
        return None
    rows = scores[(scores.attack == label) & scores.is_member.notna()]

    def tests(frame) -> list[dict]:
        out = []
        for (target, domain, null_check), g in frame.groupby(["target", "domain", "null_check"], sort=True):
            y = g.is_member.astype(bool).to_numpy()
            s = g.score.to_numpy(dtype=float)
            if y.all() or not y.any():
                continue
            out.append({"target": str(target), "domain": str(domain), "null_check": bool(null_check),
                        **global_test(s[y], s[~y], n_boot=n_boot, seed=seed)})
        return out

    every = tests(rows)
    if not every:
        return None
    real = [t for t in every if not t["null_check"]]
    null = [t for t in every if t["null_check"]]
    blind = tests(scores[(scores.attack == BLIND_ATTACK) & scores.is_member.notna() & ~scores.null_check.astype(bool)])
    for b in blind:
        b["valid"] = not (b["auroc_lo"] > 0.5)
    family_p = min(1.0, len(real) * min(t["p_value"] for t in real)) if real else float("nan")
    out = {"primary": label, "targets": real, "n_targets": len(real),
           "n_rejected": sum(t["p_value"] < GLOBAL_ALPHA for t in real), "family_p": family_p,
           "null_targets": null, "blind": blind, "valid": all(b["valid"] for b in blind),
           "evidence": bool(family_p < GLOBAL_ALPHA)}
    out["epsilon"] = study_epsilon(rows[~rows.null_check.astype(bool)])
    out["headline"] = study_sentence(out)
    return out


EPSILON_FPRS = (0.01, 0.05, 0.1)
"""FPR levels at which a study's empirical epsilon lower bound is read; the largest bound is reported, each computed
at confidence 1 - 0.05 / len(EPSILON_FPRS) so the reported one holds at 95% whichever level it came from."""


def study_epsilon(rows, *, delta: float = 0.0) -> dict | None:
    """The empirical epsilon lower bound (`epsilon_lower_bound`) of a study's primary attack: its real targets' scores
    robust-z-normalised within each target (label-free, leakaudit.metrics.normalise_within_target), one threshold per
    level of EPSILON_FPRS at the non-members' (1 - level) quantile, the largest bound over the levels (Bonferroni over
    them). rows: the primary attack's labelled real-target rows (record_id, target, domain, score, is_member, and
    `label` or `attack`). None without both classes."""
    from leakaudit.metrics import normalise_within_target

    frame = rows.assign(label=rows["label"] if "label" in rows else rows["attack"])
    z = normalise_within_target(frame)
    y = z.is_member.astype(bool).to_numpy()
    s = _finite(z.score.to_numpy(dtype=float))
    if y.all() or not y.any():
        return None
    confidence = 1 - 0.05 / len(EPSILON_FPRS)
    best = None
    for level in EPSILON_FPRS:
        threshold = np.quantile(s[~y], 1 - level, method="higher")
        flag = s > threshold
        e = epsilon_lower_bound(int((flag & y).sum()), int((~flag & y).sum()), int((flag & ~y).sum()),
                                int((~flag & ~y).sum()), delta=delta, confidence=confidence)
        e["at_fpr_level"] = level
        if best is None or e["epsilon_lb"] > best["epsilon_lb"]:
            best = e
    return best


def study_sentence(v: dict) -> str:
    """The study verdict's headline (study_verdict's keys)."""
    nulls = ", ".join(f"{t['target']} p = {t['p_value']:.2g}" for t in v["null_targets"]) or "none"
    tail = (f" Null targets (trained on no candidate): {nulls}.")
    if not v["valid"]:
        bad = [b["target"] for b in v["blind"] if not b["valid"]]
        return (f"The test is not valid for this study: a text-only classifier tells members from non-members on "
                f"{', '.join(bad)}, so a score difference would not show leakage." + tail)
    what = (f"{v['n_rejected']} of {v['n_targets']} targets' members score higher than their non-members at "
            f"p < {GLOBAL_ALPHA:g} ({v['primary']}); Bonferroni over the targets p = {v['family_p']:.2g}.")
    head = "The targets leak: " if v["evidence"] else "No evidence that the targets leak: "
    return head + what + tail
