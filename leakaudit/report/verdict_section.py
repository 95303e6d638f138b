"""The audit's verdict box, the first section of its report (leakaudit.verdict; audit.json's "verdict").

`read_verdict(run_dir)` reads it (None for a study or an audit made before verdicts); `verdict_section(verdict)`
is the HTML box: the headline in words and numbers, the exchangeability check, warnings repeated, the global test
of every attack (the primary one fixed in advance, the others exploratory) and the flagged candidates.
`verdict_page(run_dir)` is a whole page holding only the box, for an audit without labels (no metrics to report).
`verdict_box(run)` is the report's first section: the audit's box, or for a study the study verdict
(leakaudit.verdict.study_verdict: do the targets leak, with the null targets and the blind text baseline beside it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from leakaudit.report import html as H

ANCHOR = "verdict"


def read_verdict(run_dir: str | Path) -> dict | None:
    """audit.json's verdict, or None (a study, or an audit without one)."""
    path = Path(run_dir) / "audit.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("verdict")


def _tests_table(verdict: dict) -> pd.DataFrame:
    rows = []
    for attack, t in verdict["global"].items():
        rows.append({"attack": attack + (" (primary)" if attack == verdict["primary"] else ""),
                     "AUROC": t["auroc"], "CI low": t["auroc_lo"], "CI high": t["auroc_hi"],
                     "p-value (one-sided)": t["p_value"], "candidates": t["n_candidates"], "null": t["n_null"]})
    b = verdict.get("blind")
    if b is not None:
        rows.append({"attack": "blind text (exchangeability check)", "AUROC": b["auroc"], "CI low": b["auroc_lo"],
                     "CI high": b["auroc_hi"], "p-value (one-sided)": b["p_value"],
                     "candidates": b["n_candidates"], "null": b["n_null"]})
    return pd.DataFrame(rows)


def verdict_section(verdict: dict | None) -> str:
    """The verdict box ('' without a verdict)."""
    if not verdict:
        return ""
    cls = "fail" if (verdict["evidence"] or not verdict["valid"]) else "pass"
    parts = [f'<p class="{cls}">{H.esc(verdict["headline"])}</p>']
    for w in verdict["warnings"] + ([] if verdict["valid"] else ["The exchangeability check failed (see above)."]):
        parts.append(f'<p class="fail">{H.esc(w)}</p>')
    parts += [f'<p class="note">{H.esc(d)}</p>' for d in verdict["details"] if d not in verdict["warnings"]]
    parts.append(H.table(_tests_table(verdict), floatfmt="{:.3g}"))
    parts.append('<p class="note">Only the primary attack\'s test was fixed in advance; the other rows are '
                 "exploratory (no correction for testing several attacks).</p>")
    flagged = verdict["flagged_ids"]
    if flagged:
        p = dict(zip(verdict["candidate_ids"], verdict["p_values"]))
        parts.append("<details><summary>Flagged candidates</summary>"
                     + H.table(pd.DataFrame({"record_id": flagged, "p_value": [p.get(r) for r in flagged]}),
                               floatfmt="{:.3g}") + "</details>")
    return H.section("Verdict: was the candidates' data used?", *parts, anchor=ANCHOR)


def verdict_page(run_dir: str | Path) -> str | None:
    """A report page holding only the verdict box (an audit without labels), or None without a verdict."""
    verdict = read_verdict(run_dir)
    if not verdict:
        return None
    return H.page("leakaudit audit", "No membership labels: the verdict against the null sample; per-candidate "
                  "p-values in candidates.csv.", [verdict_section(verdict)])


def study_section(verdict: dict | None) -> str:
    """A study's verdict box ('' without one)."""
    if not verdict:
        return ""
    cls = "fail" if (verdict["evidence"] or not verdict["valid"]) else "pass"
    cols = ["target", "domain", "auroc", "auroc_lo", "auroc_hi", "p_value", "n_candidates", "n_null"]
    names = {"auroc_lo": "CI low", "auroc_hi": "CI high", "p_value": "p-value (one-sided)", "n_candidates": "members",
             "n_null": "non-members", "auroc": "AUROC"}
    table = pd.DataFrame(verdict["targets"] + verdict["null_targets"])
    blind = pd.DataFrame(verdict["blind"])
    parts = [f'<p class="{cls}">{H.esc(verdict["headline"])}</p>',
             H.table(table[cols].rename(columns=names), floatfmt="{:.3g}"),
             '<p class="note">Per target: one-sided Mann-Whitney test of its members\' scores against its '
             "non-members' under the primary attack, fixed in advance; null targets (trained on no candidate) last. "
             "The family p-value is Bonferroni's, valid however the targets depend on each other.</p>"]
    eps = verdict.get("epsilon")
    if eps and eps.get("epsilon_lb") is not None:
        parts.append(f'<p class="note">Empirical privacy: ε ≥ {eps["epsilon_lb"]:.2f} (δ = {eps["delta"]:g}) at '
                     f'{1 - 0.05:.0%} confidence, from the primary attack flagging the top {eps["at_fpr_level"]:.0%} '
                     f'of each target (TPR {eps["tpr"]:.2f}, FPR {eps["fpr"]:.2f} over {eps["n_members"]} members and '
                     f'{eps["n_non_members"]} non-members; Clopper-Pearson bounds, the largest over FPR levels 1%, 5% '
                     "and 10% with Bonferroni over them; Jagielski et al. 2020). A number to set beside a DP "
                     "budget: a training run that was ε-DP could not show more.</p>")
    if not blind.empty:
        parts += ['<p class="note">Blind text baseline (members vs non-members as text; a CI above 0.5 makes the test '
                  "invalid):</p>", H.table(blind[cols].rename(columns=names), floatfmt="{:.3g}")]
    return H.section("Verdict: do the targets leak?", *parts, anchor=ANCHOR)


def run_study_verdict(run) -> dict | None:
    """A study's verdict from its scores (leakaudit.verdict.study_verdict); None for an audit (whose verdict is in
    audit.json) or a run without a labelled primary attack."""
    if (Path(run.root) / "audit.json").is_file():
        return None  # an audit's verdict is its own (audit.json), or none for one made before verdicts
    from leakaudit.verdict import study_verdict

    return study_verdict(run.scores, n_boot=200, seed=0)


def verdict_box(run, study: dict | None = None) -> str:
    """The report's first section for a run (leakaudit.report.load.RunData): the audit's verdict box when audit.json
    has one, else the study verdict (`study`, as run_study_verdict gives it) ('' when neither applies)."""
    audit = read_verdict(run.root)
    if audit:
        return verdict_section(audit)
    return study_section(study)
