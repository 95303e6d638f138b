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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from leakaudit.errors import ConfigError, InputError
from leakaudit.io import atomic_path, read_json, write_json

PLAN_FILE = "plan.json"
TABLE_FILE = "membership.parquet"
ROLES = ("student", "null", "reference", "target", "offline")
OFFLINE = "offline"
"""TargetView.references for the offline design: a target compared with its domain's offline references."""
MATCHED = "matched"
"""TargetView.references for the keep-matrix design: a target compared with each record's matched references."""
TARGET_ID = "target"
"""The model id of an audit's given target (a model the plan does not train)."""


@dataclass
class MembershipPlan:
    """A saved plan.

    table: one row per (record_id, model_id) with is_member (bool); every candidate appears for every model.
    models: model_id -> {"domain": str, "role": "student" | "null" | "reference"}.
    candidates / population: record ids, per domain.
    """

    design: str
    seed: int
    params: dict
    models: dict[str, dict[str, str]]
    candidates: dict[str, list[str]]
    population: dict[str, list[str]]
    table: pd.DataFrame = field(repr=False)
    background: dict[str, list[str]] = field(default_factory=dict)
    """Per domain: records every trained model of the domain (students, null student) trains on besides its own
    records; never a candidate, never population. Empty = no background set (the earlier design)."""

    # ---- queries -------------------------------------------------------------------------------------
    def members(self, model_id: str) -> list[str]:
        """Record ids `model_id` trains on, in plan order (training shuffles them itself): its IN candidates (or
        population records for a null student), then the domain's background set."""
        t = self.table
        return t.loc[(t.model_id == model_id) & t.is_member, "record_id"].tolist()

    def models_of(self, domain: str, role: str | None = None) -> list[str]:
        return [m for m, info in self.models.items()
                if info["domain"] == domain and (role is None or info["role"] == role)]

    def is_member(self, model_id: str, record_id: str) -> bool:
        t = self.table
        rows = t.loc[(t.model_id == model_id) & (t.record_id == record_id), "is_member"]
        if rows.empty:
            raise KeyError(f"no plan row for model {model_id}, record {record_id}")
        return bool(rows.iloc[0])

    def labels(self, model_id: str) -> dict[str, bool]:
        """Candidate record_id -> is_member for `model_id` (candidates of the model's domain only)."""
        domain = self.models[model_id]["domain"]
        t = self.table[(self.table.model_id == model_id) & self.table.record_id.isin(self.candidates[domain])]
        return dict(zip(t.record_id, t.is_member.astype(bool)))

    def null_sample(self, domain: str) -> list[str]:
        """An audit's null sample for `domain`: known non-members that no reference trained on, scored like the
        candidates (they sit at the end of `.candidates[domain]` so that every stage samples and scores them alike;
        leakaudit.verdict compares the candidates with them). Empty for a study or an audit planned without one."""
        return list(self.params.get("null_sample", {}).get(domain, []))

    def audit_candidates(self, domain: str) -> list[str]:
        """`.candidates[domain]` without the null sample: the records an audit asks about."""
        null = set(self.null_sample(domain))
        return [r for r in self.candidates[domain] if r not in null]

    def keep(self, domain: str) -> tuple[list[str], list[str], np.ndarray]:
        """The domain's keep matrix as LiRA's reference code holds it: (model ids [M], candidate ids [N],
        bool [M, N] with keep[m, n] = model m trained on candidate n). Rows: the domain's trainable references
        (role student or reference), sorted by id; columns: the domain's candidates in plan order."""
        models = sorted(m for m in self.models_of(domain) if self.models[m]["role"] in ("student", "reference"))
        records = list(self.candidates[domain])
        t = self.table[self.table.model_id.isin(models) & self.table.record_id.isin(records)]
        wide = t.pivot(index="model_id", columns="record_id", values="is_member")
        wide = wide.reindex(index=models, columns=records)
        if wide.isna().to_numpy().any():
            raise InputError("membership table lacks a (model, candidate) row", path=TABLE_FILE)
        return models, records, wide.to_numpy(dtype=bool)

    def views(self) -> list["TargetView"]:
        """Every attacked model with the labels it is attacked with, in a fixed order: each student (its own
        labels), each audit target (labels from the candidates' `meta.is_member` when given), then each null
        student, the k-th of a domain attacked with the labels of the domain's k-th student (it trained on no
        candidate, so its AUROC must be ~0.5; distinct label sources make several null students distinct draws)."""
        views = [TargetView(m, info["domain"], m, False) for m, info in self.models.items()
                 if info["role"] in ("student", "target")]
        for m, info in self.models.items():
            if info["role"] == "null":
                k = self.models_of(info["domain"], "null").index(m)
                views.append(TargetView(m, info["domain"], self.models_of(info["domain"], "student")[k], True))
        return views

    def offline_views(self) -> list["TargetView"]:
        """The targets of `views()` again, each to be compared with its domain's offline references (the offline
        design: reference students that trained on the background and reference-only records, never on a
        candidate), for domains that have them; empty otherwise. A null target keeps its label source."""
        domains = {info["domain"] for info in self.models.values() if info["role"] == OFFLINE}
        return [TargetView(v.target, v.domain, v.label_source, v.null_check, references=OFFLINE)
                for v in self.views() if v.domain in domains]

    def references(self, view: "TargetView", k_in: int, k_out: int) -> "MatchedReferences":
        """The references that score each candidate for `view`: `matched_references` (keep-matrix design), or
        for an offline view every offline reference of the domain, OUT for every candidate, no IN reference."""
        if view.references != OFFLINE:
            return self.matched_references(view, k_in, k_out)
        refs = sorted(self.models_of(view.domain, OFFLINE))
        records = list(self.candidates[view.domain])
        trained = self.table[self.table.model_id.isin(refs) & self.table.record_id.isin(records) & self.table.is_member]
        if not trained.empty:  # a plan built by hand could do this; keep_matrix_plan never does
            raise InputError(f"offline reference {trained.model_id.iloc[0]} trained on candidate "
                             f"{trained.record_id.iloc[0]}", path=TABLE_FILE)
        outs = np.array([refs] * len(records), dtype=object).reshape(len(records), len(refs))
        return MatchedReferences(records, np.empty((len(records), 0), dtype=object), outs, refs)

    def reference_counts(self, n_matched: int = 0) -> tuple[int, int]:
        """(k_in, k_out): how many IN and OUT references score each candidate of any target, fixed per plan so the
        count can never reveal a record's membership (with a balanced matrix the target's own membership changes
        how many OUT students exist). keep_matrix: n_matched, or M/2 - 1 when 0, of each; disjoint: no IN
        reference and every reference OUT."""
        if self.design == "disjoint":
            return 0, len([m for m, i in self.models.items() if i["role"] == "reference"])
        k = n_matched or int(self.params["n_students"]) // 2 - 1
        return k, k

    def matched_references(self, view: "TargetView", k_in: int, k_out: int) -> "MatchedReferences":
        """The ONE answer to "which references, IN and OUT, score candidate r for this target": exactly k_in
        models that trained on r and k_out that did not, among the domain's students and references, never the
        target and never a model in `view.excluded` (a null target's label source: otherwise which references
        are IN or OUT would carry its labels into the null check). Chosen by a seeded draw keyed on
        (plan seed, target, record, member), so every stage and every rerun gets the same ones."""
        models, records, keep = self.keep(view.domain)
        usable = np.array([m != view.target and m not in view.excluded for m in models])
        ins, outs = [], []
        for j, rid in enumerate(records):
            chosen = {}
            for member, k in ((True, k_in), (False, k_out)):
                eligible = [models[i] for i in np.flatnonzero(usable & (keep[:, j] == member))]
                if len(eligible) < k:
                    raise ConfigError(f"record {rid}: only {len(eligible)} {'IN' if member else 'OUT'} references "
                                      f"for target {view.target}, {k} needed")
                rng = np.random.default_rng(_stable_seed(self.seed, view.target, rid, str(member)))
                chosen[member] = sorted(rng.choice(eligible, size=k, replace=False).tolist()) if k else []
            ins.append(chosen[True])
            outs.append(chosen[False])
        pool = [m for m, ok in zip(models, usable) if ok]
        return MatchedReferences(records, np.array(ins, dtype=object).reshape(len(records), k_in),
                                 np.array(outs, dtype=object).reshape(len(records), k_out), pool)

    # ---- persistence -----------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        with atomic_path(directory / TABLE_FILE) as tmp:
            self.table.to_parquet(tmp, index=False)
        meta = {"design": self.design, "seed": self.seed, "params": self.params, "models": self.models,
                "candidates": self.candidates, "population": self.population}
        if any(self.background.values()):  # written only when there is one, so earlier plans read back equal
            meta["background"] = self.background
        write_json(directory / PLAN_FILE, meta)

    @classmethod
    def load(cls, directory: str | Path) -> "MembershipPlan":
        directory = Path(directory)
        for name in (PLAN_FILE, TABLE_FILE):
            if not (directory / name).is_file():
                raise InputError("membership plan file missing", path=str(directory / name))
        meta = read_json(directory / PLAN_FILE)
        table = pd.read_parquet(directory / TABLE_FILE)
        missing = {"record_id", "model_id", "is_member"} - set(table.columns)
        if missing:
            raise InputError(f"columns {sorted(missing)} missing", path=str(directory / TABLE_FILE))
        table["is_member"] = table["is_member"].astype(bool)
        return cls(table=table, **meta)

    def equals(self, other: "MembershipPlan") -> bool:
        a = self.table.sort_values(["model_id", "record_id"]).reset_index(drop=True)
        b = other.table.sort_values(["model_id", "record_id"]).reset_index(drop=True)
        return (self.design == other.design and self.seed == other.seed and self.models == other.models
                and self.candidates == other.candidates and self.population == other.population
                and {d: v for d, v in self.background.items() if v} == {d: v for d, v in other.background.items() if v}
                and a.equals(b))


@dataclass(frozen=True)
class TargetView:
    """Who is attacked and with which labels. For a null target, labels come from another student."""

    target: str
    domain: str
    label_source: str
    null_check: bool
    references: str = MATCHED
    """Which references compare this target's records: 'matched' (the keep-matrix students without the record)
    or 'offline' (the domain's offline references)."""

    @property
    def excluded(self) -> tuple[str, ...]:
        """Models that must never serve as this target's references: a null target's label source."""
        return (self.label_source,) if self.null_check else ()


@dataclass(frozen=True)
class MatchedReferences:
    """One target's matched references (from `MembershipPlan.matched_references`).

    record_ids [N]: the domain's candidates; ins [N, k_in] / outs [N, k_out]: model ids (object arrays) that did /
    did not train on each record; pool: every model that may serve this target as a reference (the columns of
    the population comparison), sorted.
    """

    record_ids: list[str]
    ins: np.ndarray
    outs: np.ndarray
    pool: list[str]

    def fresh_scorers(self, target: str, base_id: str) -> dict[str, list[str] | None]:
        """Which models score the target's fresh trajectories, on which records (None = all): the target and the
        base on every candidate; each reference only on the records it is a matched OUT reference for."""
        needs: dict[str, list[str] | None] = {target: None, base_id: None}
        for rid, refs in zip(self.record_ids, self.outs):
            for m in refs:
                needs.setdefault(m, []).append(rid)
        return needs


def null_model_id(domain: str, k: int) -> str:
    """The k-th null student's id: ``<domain>-null`` for the first (the id of plans made before there could be
    several), ``<domain>-null<k>`` after it."""
    return f"{domain}-null" if k == 0 else f"{domain}-null{k}"


def _stable_seed(*parts: object) -> int:
    """A 64-bit seed from a tuple of values, stable across processes (unlike hash())."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def split_pool(record_ids: Sequence[str], n_candidates: int, n_population: int, seed: int,
               salt: str = "", n_teacher: int = 0, parts: dict[str, int] | None = None) -> tuple[list[str], list[str]]:
    """Shuffle one pool with `seed` and cut it into candidates and population (disjoint).
    `n_teacher` only checks that the pool also holds that many more records (see `teacher_slice`); `parts`, when
    given, names those records instead ({'teacher': 64, 'background': 32, ...}; their sum replaces n_teacher)."""
    ids = sorted(set(record_ids))
    if len(ids) != len(record_ids):
        raise InputError("duplicate record ids in the pool")
    named = parts if parts is not None else {"teacher": n_teacher}
    if n_candidates + n_population + sum(named.values()) > len(ids):
        extra = "".join(f" + {n} {name} records" for name, n in named.items() if n)
        raise ConfigError(f"pool {salt or ''} has {len(ids)} records; {n_candidates} candidates + "
                          f"{n_population} population{extra} requested")
    shuffled = _shuffled(ids, seed, salt)
    return shuffled[:n_candidates], shuffled[n_candidates:n_candidates + n_population]


def teacher_slice(record_ids: Sequence[str], n_candidates: int, n_population: int, n_teacher: int, seed: int,
                  salt: str = "") -> list[str]:
    """The `n_teacher` records that follow the candidates and population in `split_pool`'s shuffle:
    disjoint from both by construction."""
    return _slice_after(record_ids, (n_candidates, n_population), n_teacher, seed, salt)


def reference_slice(record_ids: Sequence[str], n_candidates: int, n_population: int, n_teacher: int,
                    n_background: int, n_reference: int, seed: int, salt: str = "") -> list[str]:
    """The `n_reference` records after the background in `split_pool`'s shuffle: what offline references train on
    besides the background; disjoint from every earlier slice by construction."""
    return _slice_after(record_ids, (n_candidates, n_population, n_teacher, n_background), n_reference, seed, salt)


def background_slice(record_ids: Sequence[str], n_candidates: int, n_population: int, n_teacher: int,
                     n_background: int, seed: int, salt: str = "") -> list[str]:
    """The `n_background` records that follow the candidates, the population and the teacher records in
    `split_pool`'s shuffle: disjoint from all three by construction, and a function of the seed alone (so the
    candidates, population and teacher records of a run without a background set are unchanged by adding one)."""
    return _slice_after(record_ids, (n_candidates, n_population, n_teacher), n_background, seed, salt)


def _slice_after(record_ids: Sequence[str], before: tuple[int, ...], n: int, seed: int, salt: str) -> list[str]:
    """The `n` records that follow the slices of sizes `before` (candidates, population, ...) in `split_pool`'s
    shuffle; the pool is checked to hold all of them (split_pool's error names what was requested)."""
    split_pool(record_ids, before[0], before[1], seed, salt, n_teacher=sum(before[2:]) + n)
    start = sum(before)
    return _shuffled(sorted(set(record_ids)), seed, salt)[start:start + n]


def _shuffled(ids: list[str], seed: int, salt: str) -> list[str]:
    order = np.random.default_rng(_stable_seed(seed, "split", salt)).permutation(len(ids))
    return [ids[i] for i in order]


def _check_even_models(n_models: int) -> None:
    if n_models < 2 or n_models % 2:
        raise ConfigError(f"keep-matrix design needs an even number of students >= 2, got {n_models}")


def keep_matrix(n_models: int, n_records: int, seed: int) -> np.ndarray:
    """Doubly balanced bool matrix [n_models, n_records]: every record is IN for exactly n_models/2 models
    (LiRA's construction) and, when n_records is even, every model has exactly n_records/2 members, so each
    target is scored on equal numbers of members and non-members.

    Built from LiRA's ``uniform(size=(M, N)).argsort(0) < M/2`` and then re-balanced across models by
    checkerboard swaps (a 2x2 block [[1,0],[0,1]] -> [[0,1],[1,0]] keeps every row and column sum), seeded.
    """
    _check_even_models(n_models)
    rng = np.random.default_rng(seed)
    keep = rng.uniform(size=(n_models, n_records)).argsort(0) < n_models // 2
    if n_records % 2 == 0:
        target = n_records // 2
        # move memberships from over-full to under-full models, one record at a time (column sums unchanged)
        for _ in range(n_models * n_records * 4):
            sums = keep.sum(1)
            over, under = np.flatnonzero(sums > target), np.flatnonzero(sums < target)
            if not len(over):
                break
            a, b = rng.choice(over), rng.choice(under)
            movable = np.flatnonzero(keep[a] & ~keep[b])
            j = rng.choice(movable)
            keep[a, j], keep[b, j] = False, True
        # then mix with checkerboard swaps so the result does not remember the repair
        for _ in range(n_models * n_records * 4):
            a, b = rng.choice(n_models, size=2, replace=False)
            i, j = rng.choice(n_records, size=2, replace=False)
            if keep[a, i] and keep[b, j] and not keep[a, j] and not keep[b, i]:
                keep[a, i], keep[b, j], keep[a, j], keep[b, i] = False, False, True, True
    return keep


KEEP_DESIGNS = ("lira", "balanced_subsets")


def balanced_subsets_keep_matrix(n_models: int, n_records: int, seed: int) -> np.ndarray:
    """Bool matrix [n_models, n_records] in which every record is IN for exactly n_models/2 models and the
    IN-sets are spread as evenly as possible over all C(M, M/2) subsets, taken in complementary pairs (S, not S).

    Why (experiments/reference_confound.py): with few students a record's matched OUT reference is nearly forced for a
    target's non-members (M = 4: exactly one other student is OUT), so under ``keep_matrix`` (LiRA's random
    halves) which student serves as reference is correlated with the label: in the default study 6 of a target's
    8 non-members shared one reference, and per-student offsets then separated the null target's labels (AUROC
    0.125 and 0.984 in two runs). With every subset used equally often, each other student is a target's OUT
    reference for its members and its non-members at the same rate (exactly when n_records is a multiple of
    C(M, M/2), to within one record otherwise). Complementary pairs keep every model at n_records/2 members
    for even n_records. Seeded: the order of subset pairs and the assignment of records to them.
    """
    from itertools import combinations

    _check_even_models(n_models)
    rng = np.random.default_rng(seed)
    half = n_models // 2
    pairs = [frozenset(c) for c in combinations(range(n_models), half) if 0 in c]  # one of each (S, not S)
    order = rng.permutation(len(pairs))
    subsets: list[frozenset] = []
    while len(subsets) < n_records:
        for i in order:
            subsets += [pairs[i], frozenset(range(n_models)) - pairs[i]]
        order = rng.permutation(len(pairs))
    subsets = subsets[:n_records]
    keep = np.zeros((n_models, n_records), dtype=bool)
    for record, i in enumerate(rng.permutation(n_records)):
        keep[list(subsets[i]), record] = True
    return keep


def check_n_candidates(n_candidates: int, *, field: str = "data.n_candidates") -> None:
    """Candidates per domain of a keep matrix: even (half of them are members of each target) and >= 4, so each target
    has at least two members and two non-members. The one check: DataConfig and `leakaudit plan` both call it,
    `field` naming what the user set."""
    if n_candidates < 4 or n_candidates % 2:
        raise ConfigError(f"{field}: must be an even number >= 4, got {n_candidates}")


def check_n_students(n_students: int) -> None:
    """Students per domain of a keep matrix: even (half are IN for each record) and >= 4, so every record has at least
    one matched OUT reference besides its target (with 2, `leakaudit plan --n-students 2` wrote a plan with none).
    The one check: PlanConfig and keep_matrix_plan both call it."""
    if n_students < 4 or n_students % 2:
        raise ConfigError(f"plan.n_students: must be even and >= 4 so every record has at least one matched "
                          f"reference, got {n_students}")


def keep_matrix_plan(pools: dict[str, Sequence[str]], *, n_students: int, n_candidates: int, n_population: int,
                     seed: int, null_student: bool = True, keep_design: str = "lira",
                     background: dict[str, Sequence[str]] | None = None, n_offline: int = 0,
                     reference_records: dict[str, Sequence[str]] | None = None,
                     n_null_students: int = 1) -> MembershipPlan:
    """Study plan: for each domain, cut its pool into candidates and population, then a balanced keep matrix.

    Model ids: ``<domain>-s<j>`` for students, ``<domain>-null`` for the null student (trained on
    n_candidates/2 population records, i.e. as many records as each student, but none of them candidates).
    n_null_students (with null_student): that many null students, ``<domain>-null``, ``<domain>-null1``, ...; the
    k-th trains on the k-th slice of n_candidates/2 population records (disjoint slices) and is attacked with the
    labels of student k (`MembershipPlan.views`), so the null check pools k independent draws of labels instead of
    one (one null target of 12 + 12 candidates has an AUROC sd of 0.12 under no signal;
    experiments/null_check_calibration.py).
    keep_design: 'lira' (``keep_matrix``) or 'balanced_subsets' (``balanced_subsets_keep_matrix``).
    background: per domain, record ids (not in its pool) that every student and the null student of the domain
    also train on: the same set for all of them, so what it does to a model is shared by a target and its
    references (the regime of real OPD runs, where candidates are a minority of the training set).
    n_offline, reference_records: the offline design beside the keep matrix: per domain, `n_offline` reference
    models ``<domain>-off<k>`` (role 'offline'), each trained on the background plus a seeded draw of
    n_candidates/2 of the domain's `reference_records` (ids in neither the pool nor the background), so an offline
    reference never sees a candidate or a population record and serves every candidate of every target.
    """
    if keep_design not in KEEP_DESIGNS:
        raise ConfigError(f"plan.keep_design must be one of {KEEP_DESIGNS}, got {keep_design!r}")
    check_n_students(n_students)
    if null_student and not 1 <= n_null_students <= n_students:
        raise ConfigError(f"plan.n_null_students: must be in [1, n_students = {n_students}] (each takes its "
                          f"labels from another student), got {n_null_students}")
    build = keep_matrix if keep_design == "lira" else balanced_subsets_keep_matrix
    background = {d: list(ids) for d, ids in (background or {}).items() if ids}
    reference_records = {d: list(ids) for d, ids in (reference_records or {}).items() if ids}
    unknown = (set(background) | set(reference_records)) - set(pools)
    if unknown:
        raise ConfigError(f"background or reference records for unknown domains {sorted(unknown)}")
    rows, models, candidates, population = [], {}, {}, {}
    for domain in sorted(pools):
        cand, pop = split_pool(list(pools[domain]), n_candidates, n_population, seed, salt=domain)
        candidates[domain], population[domain] = cand, pop
        shared = background.get(domain, [])
        if len(set(shared)) != len(shared):
            raise InputError(f"domain {domain}: duplicate record ids in the background set")
        clash = set(shared) & set(pools[domain])
        if clash:
            raise InputError(f"domain {domain}: {len(clash)} background records are also in the candidate/"
                             f"population pool (e.g. {sorted(clash)[0]}); the background must exclude every "
                             "candidate and population record")
        keep = build(n_students, len(cand), _stable_seed(seed, "keep", domain) % 2**32)
        for j in range(n_students):
            model_id = f"{domain}-s{j}"
            models[model_id] = {"domain": domain, "role": "student"}
            rows += [(rid, model_id, bool(keep[j, i])) for i, rid in enumerate(cand)]
            rows += [(rid, model_id, True) for rid in shared]
        if null_student:
            n_null = n_candidates // 2
            if n_null * n_null_students > len(pop):
                raise ConfigError(f"domain {domain}: {n_null_students} null student(s) need {n_null} population "
                                  f"records each, {n_null * n_null_students} in all; only {len(pop)} set aside "
                                  "(raise n_population)")
            for k in range(n_null_students):
                model_id = null_model_id(domain, k)
                models[model_id] = {"domain": domain, "role": "null"}
                rows += [(rid, model_id, False) for rid in cand]
                rows += [(rid, model_id, True) for rid in pop[k * n_null:(k + 1) * n_null]]
                rows += [(rid, model_id, True) for rid in shared]
        if n_offline:
            ref_pool = reference_records.get(domain, [])
            n_own = n_candidates // 2
            if len(ref_pool) < n_own:
                raise ConfigError(f"domain {domain}: {n_offline} offline references need at least {n_own} "
                                  f"reference-only records each, {len(ref_pool)} set aside "
                                  "(raise data.n_reference_records)")
            clash = set(ref_pool) & (set(pools[domain]) | set(shared))
            if clash:
                raise InputError(f"domain {domain}: reference-only record {sorted(clash)[0]} is also a candidate, "
                                 "population or background record")
            for k in range(n_offline):
                model_id = f"{domain}-off{k}"
                models[model_id] = {"domain": domain, "role": OFFLINE}
                rng = np.random.default_rng(_stable_seed(seed, "offline", domain, k))
                own = [ref_pool[i] for i in sorted(rng.choice(len(ref_pool), size=n_own, replace=False))]
                rows += [(rid, model_id, False) for rid in cand]
                rows += [(rid, model_id, True) for rid in own + shared]
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    params = {"n_students": n_students, "n_candidates": n_candidates, "n_population": n_population,
              "null_student": null_student}
    if null_student and n_null_students != 1:  # recorded only when not the default, so existing plans compare equal
        params["n_null_students"] = n_null_students
    if keep_design != "lira":  # recorded only when not the default, so existing plans compare equal
        params["keep_design"] = keep_design
    if background:
        params["n_background"] = {d: len(v) for d, v in sorted(background.items())}
    if n_offline:
        params["n_offline"] = n_offline
        params["n_reference_records"] = {d: len(v) for d, v in sorted(reference_records.items())}
    return MembershipPlan("keep_matrix", seed, params, models, candidates, population, table,
                          background={d: background[d] for d in sorted(background)})


def disjoint_plan(candidates: Sequence[str], population: Sequence[str], *, domain: str, n_references: int,
                  records_per_reference: int, seed: int, external_references: Sequence[str] = (),
                  target_labels: dict[str, bool] | None = None, n_held_out: int = 0,
                  background: Sequence[str] = (), null_sample: Sequence[str] = ()) -> MembershipPlan:
    """Audit plan: references that never saw a candidate, and (for `leakaudit audit`) the given target.

    References: `external_references` (model paths or hub ids the auditor trained without any candidate; their
    plan.models entry records the path, and they are taken to be OUT for every record), or else `n_references`
    students trained on seeded subsets of `records_per_reference` population records. `n_held_out` population
    records (a seeded choice) are never trained on by any reference: RMIA compares against population records
    that are OUT for every reference. `background`: record ids every trained reference also trains on (the
    target's background set; never a candidate or population record). With `target_labels` (candidate id -> is_member, e.g. from the candidates'
    meta.is_member) the plan also holds a model "target" with those labels (no rows when unknown).
    `null_sample`: known non-members no reference trains on (never a candidate, population or background record),
    appended to the candidates so that they are sampled and scored alike, OUT for every model, labelled non-members
    when the candidates carry labels, and listed in params["null_sample"] (`MembershipPlan.null_sample`).
    """
    overlap = set(candidates) & set(population)
    if overlap:
        raise InputError(f"{len(overlap)} candidate records also appear in the population "
                         f"(e.g. {sorted(overlap)[0]}); references must exclude every candidate")
    clash = set(background) & (set(candidates) | set(population))
    if clash:
        raise InputError(f"background record {sorted(clash)[0]} is also a candidate or population record")
    clash = set(null_sample) & (set(candidates) | set(population) | set(background))
    if clash:
        raise InputError(f"null-sample record {sorted(clash)[0]} is also a candidate, population or background record")
    asked = list(candidates)
    candidates = asked + list(null_sample)
    if background and external_references:
        raise ConfigError("a background set is only for references trained here")
    pop = sorted(population)
    held = set(_shuffled(pop, seed, f"held-out {domain}")[:n_held_out]) if n_held_out else set()
    trainable = [rid for rid in pop if rid not in held]
    rows, models = [], {}
    if external_references:
        for k, ref in enumerate(external_references):
            model_id = f"{domain}-ref{k}"
            models[model_id] = {"domain": domain, "role": "reference", "path": str(ref)}
            rows += [(rid, model_id, False) for rid in list(candidates) + pop]
    else:
        if n_references < 1:
            raise ConfigError("n_references must be >= 1")
        if not 1 <= records_per_reference <= len(trainable):
            raise ConfigError(f"records_per_reference={records_per_reference} must be in [1, {len(trainable)}] "
                              f"(population {len(pop)} records, {len(held)} held out)")
        for k in range(n_references):
            model_id = f"{domain}-ref{k}"
            models[model_id] = {"domain": domain, "role": "reference"}
            rng = np.random.default_rng(_stable_seed(seed, "ref", domain, k))
            chosen = {trainable[i] for i in rng.choice(len(trainable), size=records_per_reference, replace=False)}
            rows += [(rid, model_id, False) for rid in candidates]
            rows += [(rid, model_id, rid in chosen) for rid in pop]
            rows += [(rid, model_id, True) for rid in background]
    params: dict = {"n_references": len(models), "records_per_reference": records_per_reference}
    if n_held_out:
        params["n_held_out"] = n_held_out
    if background:
        params["n_background"] = {domain: len(background)}
    if null_sample:
        params["null_sample"] = {domain: list(null_sample)}
    models[TARGET_ID] = {"domain": domain, "role": "target"}
    if target_labels is not None:
        target_labels = {**target_labels, **{rid: False for rid in null_sample}}
        missing = set(asked) - set(target_labels)
        if missing:
            raise InputError(f"no label for candidate {sorted(missing)[0]}", field="meta.is_member")
        rows += [(rid, TARGET_ID, bool(target_labels[rid])) for rid in candidates]
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    return MembershipPlan("disjoint", seed, params, models, {domain: list(candidates)},
                          {domain: list(population)}, table,
                          background={domain: list(background)} if background else {})
