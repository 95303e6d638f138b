"""The report's check sections: the blind text check, the design check (reference balance of a keep-matrix plan),
the training check, the null check and the negatives table (how many non-members each FPR level rests on)."""

from __future__ import annotations

import pandas as pd

from leakaudit.metrics import DEFAULT_ALPHAS, attack_base, fpr_label, resolvable_key
from leakaudit.report import html as H
from leakaudit.rundir import RunDir


def blind_check_section(null: pd.DataFrame, verdict: dict) -> str:
    """HTML: the verdict of the blind text check and the per-level null table."""
    cls = "fail" if verdict["warning"] else "pass"
    cols = ["label", "level", "domain", "target", "auroc", "auroc_lo", "auroc_hi", "null_mean", "null_lo",
            "null_hi", "p_value", "n_null", "exact", "permutation", "status"]
    note = ('<p class="note">The null refits the whole cross-validated blind_text classifier on relabelled '
            'candidates: within a domain one random permutation of the candidates relabels every target at once '
            '(each keeps its member count). With few records its mean lies below 0.5: that, not 0.5, is what no '
            f'text signal looks like. null_lo / null_hi: its 95% interval. {H.esc(verdict["rule"])}.</p>')
    return H.section("Blind text check", f'<p class="{cls}">{H.esc(verdict["message"])}</p>', note,
                     H.table(null[[c for c in cols if c in null]]) if not null.empty else "", anchor="blind")


REFERENCE_TVD_WARN = 0.5
"""Above this total variation distance between members' and non-members' reference identities the report warns."""


def design_check(rd: RunDir, config: dict) -> list[dict]:
    """`leakaudit.assemble.reference_balance` for a study's keep-matrix plan; [] for audits or runs without one."""
    from leakaudit.assemble import reference_balance
    from leakaudit.membership import PLAN_FILE, MembershipPlan

    if not (rd.membership.is_file() and (rd.plan_dir / PLAN_FILE).is_file()):
        return []
    plan = MembershipPlan.load(rd.plan_dir)
    if plan.design != "keep_matrix":
        return []
    n_matched = int((config.get("plan") or {}).get("n_matched_references") or 0)
    return reference_balance(plan, plan.reference_counts(n_matched)[1])


def design_check_section(rows: list[dict]) -> str:
    """HTML: the per-target reference-balance table and a verdict against REFERENCE_TVD_WARN."""
    worst = max((r["tvd"] for r in rows), default=0.0)
    bad = worst > REFERENCE_TVD_WARN
    verdict = (f'<p class="{"fail" if bad else "pass"}">'
               + (f"Reference identity is tied to membership (largest distance {worst:.2f}): attacks that use "
                  "reference students (Leaky, fresh_gap_*, LiRA, RMIA, ref_ratio_refs) can separate members from "
                  "non-members through WHICH student each record got as reference, since students differ by "
                  "large offsets. Use plan.keep_design: balanced_subsets, or more students."
                  if bad else f"Reference identity is balanced between members and non-members (largest "
                  f"distance {worst:.2f}).") + "</p>")
    df = pd.DataFrame([{**r, "refs_members": str(r["refs_members"]), "refs_nonmembers": str(r["refs_nonmembers"])}
                       for r in rows])
    note = ('<p class="note">Per target: how often each student serves as the matched OUT reference for its members '
            'and for its non-members, and the total variation distance between the two (0 = none, 1 = the '
            'reference gives the label away). Computed from the plan alone.</p>')
    return H.section("Design check: reference balance", verdict, note, H.table(df), anchor="design")


def training_check_section(rows: list[dict]) -> str:
    """HTML: per student, the teacher KL at the first step, its minimum and at the end, and a verdict."""
    bad = [r["model_id"] for r in rows if not r["moved_toward_teacher"]]
    verdict = (f'<p class="{"fail" if bad else "pass"}">'
               + (f"{len(bad)} of {len(rows)} students ended FURTHER from their teacher than they started "
                  f"({', '.join(bad)}): they did not learn what the teacher taught (often a collapse into a "
                  "degenerate output). Attacks on them, and the null check if one is the null student, say little."
                  if bad else f"Every one of the {len(rows)} students ended closer to its teacher than it started.")
               + "</p>")
    note = ('<p class="note">teacher_kl: mean per-token KL(student || teacher) on each training step\'s own samples '
            '(nats/token), from the students\' ledgers; last = mean of the final steps.</p>')
    return H.section("Training check", verdict, note, H.table(pd.DataFrame(rows)), anchor="training")


def null_check_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Null-target AUROC per attack (pooled over null targets) and whether its 95% CI contains 0.5."""
    if metrics.empty:
        return pd.DataFrame()
    rows = metrics[metrics["null_check"] & (metrics["level"] == "all")].copy()
    rows["straddles_0.5"] = (rows["auroc_lo"] <= 0.5) & (rows["auroc_hi"] >= 0.5)
    return rows[["label", "family", "n_targets", "auroc", "auroc_lo", "auroc_hi", "n_pos", "n_neg",
                 "straddles_0.5"]].reset_index(drop=True)


def null_verdict(nulls: pd.DataFrame) -> tuple[bool, list[str]]:
    """(passed, the labels it read) for null_check_table's rows. The verdict is on Leaky, the attack under test, in
    every reference design it ran with ('leaky' and 'leaky@offline': the offline one is Leaky's primary design):
    passed when each one's CI contains 0.5. Without a Leaky row, on every attack. With many attacks at 95% coverage
    about 5% of the others exclude 0.5 by chance alone, so the page reports their count against that."""
    leaky = nulls[nulls["label"].map(attack_base) == "leaky"] if "label" in nulls else nulls.iloc[:0]
    read = leaky if len(leaky) else nulls
    labels = [str(x) for x in read["label"]] if "label" in read else ["every attack"]
    return bool(read["straddles_0.5"].astype(bool).all()), labels


def negatives_table(metrics: pd.DataFrame, alphas=DEFAULT_ALPHAS) -> pd.DataFrame:
    """Members / non-members per scope (target, domain, all) and which TPR@α are resolvable (α·n_neg ≥ 1)."""
    if metrics.empty:
        return pd.DataFrame()
    m = metrics[~metrics["null_check"]].drop_duplicates(["level", "target", "domain"])
    out = m[["level", "domain", "target", "n_pos", "n_neg"]].copy()
    for a in alphas:
        out[f"{fpr_label(a)} resolvable"] = m[resolvable_key(a)].map({True: "yes", False: "no"})
    return out.reset_index(drop=True)
