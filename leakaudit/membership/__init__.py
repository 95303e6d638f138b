"""Membership plans: a seeded, saved, reproducible decision of which record trains which student.

Two designs (docs/architecture.md, "Membership plan"):

- ``keep_matrix`` (studies): per domain, M students (M even); every candidate is IN for exactly M/2 of them,
  using LiRA's balanced construction (Carlini et al. 2022, tensorflow/privacy research/mi_lira_2021/train.py:
  ``keep = rng.uniform(size=(M, N)).argsort(0) < M/2``). Every student is a target in turn; for a record, the
  students without it are its matched references. Optionally one ``null`` student per domain trained on
  population records only, i.e. on no candidate: attacking it must give AUROC ≈ 0.5.
- ``disjoint`` (audits of a deployed student): K reference students, each trained on a seeded random subset
  of population records (or given by the auditor), plus the given ``target``; no candidate is ever IN for a
  reference, so every reference is OUT for every candidate.

The plan is also the one place that answers "which references, IN and OUT, score record r for target t"
(`MembershipPlan.matched_references`, over the keep matrix held as a bool array, `MembershipPlan.keep`).

A study may also give each domain a *background set* (``MembershipPlan.background``): records that are never
candidates nor population, trained on by every student and the null student of the domain, so that a candidate is
a minority of what a student trains on, as in real OPD runs, and what training on other records does to a model
is shared by a target and its references.

Members and non-members come from one shuffled pool: the split is a function of the seed alone, never of a
record's content or source order. Population records are held out of every candidate set; they feed the
null student, RMIA's population comparison and (optionally) teacher preparation.

Modules: `plan` (MembershipPlan and its queries, TargetView, MatchedReferences), `builders` (keep_matrix_plan,
disjoint_plan), `keep` (the keep matrices), `slices` (the one place a domain's pool is cut and seeded). Import the
names from here.
"""

from leakaudit.membership.builders import disjoint_plan, keep_matrix_plan, null_model_id
from leakaudit.membership.keep import (KEEP_DESIGNS, balanced_subsets_keep_matrix, check_n_candidates,
                                       check_n_students, keep_matrix)
from leakaudit.membership.plan import (MATCHED, OFFLINE, PLAN_FILE, ROLES, TABLE_FILE, TARGET_ID,
                                       MatchedReferences, MembershipPlan, TargetView)
from leakaudit.membership.slices import (POOL_PARTS, background_slice, reference_slice, shuffled, slice_pool,
                                         split_pool, stable_seed, teacher_slice)

__all__ = ["KEEP_DESIGNS", "MATCHED", "OFFLINE", "PLAN_FILE", "POOL_PARTS", "ROLES", "TABLE_FILE", "TARGET_ID",
           "MatchedReferences", "MembershipPlan", "TargetView", "background_slice", "balanced_subsets_keep_matrix",
           "check_n_candidates", "check_n_students", "disjoint_plan", "keep_matrix", "keep_matrix_plan",
           "null_model_id", "reference_slice", "shuffled", "slice_pool", "split_pool", "stable_seed",
           "teacher_slice"]
