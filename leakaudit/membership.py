"""Membership plans: a seeded, saved, reproducible decision of which record trains which student.

Two designs (DESIGN.md step 2):

- ``keep_matrix`` (studies): per domain, M students (M even); every candidate is IN for exactly M/2 of them,
  using LiRA's balanced construction (Carlini et al. 2022, tensorflow/privacy research/mi_lira_2021/train.py:
  ``keep = rng.uniform(size=(M, N)).argsort(0) < M/2``). Every student is a target in turn; for a record, the
  students without it are its matched references. Optionally one ``null`` student per domain trained on
  population records only, i.e. on no candidate: attacking it must give AUROC ≈ 0.5.
- ``disjoint`` (audits of a deployed student): K reference students, each trained on a seeded random subset
  of population records; no candidate is ever IN for a reference.

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
ROLES = ("student", "null", "reference")


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

    # ---- queries -------------------------------------------------------------------------------------
    def members(self, model_id: str) -> list[str]:
        """Record ids `model_id` trains on, in plan order (training shuffles them itself)."""
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

    def references_for(self, target: str, record_id: str, *, member: bool, k: int,
                       exclude: Sequence[str] = ()) -> list[str]:
        """Exactly `k` students of the target's domain (never the target, never a null student, never one in
        `exclude`) whose membership of `record_id` equals `member`, chosen by a seeded draw keyed on
        (seed, target, record).

        The count is fixed so that the number of references can never reveal the record's membership in the
        target (with a balanced matrix the target's own membership changes how many OUT students exist).
        A null target borrows another student's labels; that student goes in `exclude`, or which references
        are IN or OUT would carry its labels into the null check.
        """
        domain = self.models[target]["domain"]
        pool = [m for m in self.models_of(domain, "student") + self.models_of(domain, "reference")
                if m != target and m not in exclude]
        t = self.table
        rows = t[(t.record_id == record_id) & t.model_id.isin(pool) & (t.is_member == member)]
        eligible = sorted(rows.model_id.tolist())
        if len(eligible) < k:
            raise ConfigError(f"record {record_id}: only {len(eligible)} {'IN' if member else 'OUT'} references "
                              f"for target {target}, {k} needed")
        rng = np.random.default_rng(_stable_seed(self.seed, target, record_id, str(member)))
        return sorted(rng.choice(eligible, size=k, replace=False).tolist())

    # ---- persistence -----------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        with atomic_path(directory / TABLE_FILE) as tmp:
            self.table.to_parquet(tmp, index=False)
        write_json(directory / PLAN_FILE, {
            "design": self.design, "seed": self.seed, "params": self.params, "models": self.models,
            "candidates": self.candidates, "population": self.population,
        })

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
                and a.equals(b))


def _stable_seed(*parts: object) -> int:
    """A 64-bit seed from a tuple of values, stable across processes (unlike hash())."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def split_pool(record_ids: Sequence[str], n_candidates: int, n_population: int, seed: int,
               salt: str = "", n_teacher: int = 0) -> tuple[list[str], list[str]]:
    """Shuffle one pool with `seed` and cut it into candidates and population (disjoint).
    `n_teacher` only checks that the pool also holds that many teacher records (see `teacher_slice`)."""
    ids = sorted(set(record_ids))
    if len(ids) != len(record_ids):
        raise InputError("duplicate record ids in the pool")
    if n_candidates + n_population + n_teacher > len(ids):
        extra = f" + {n_teacher} teacher records" if n_teacher else ""
        raise ConfigError(f"pool {salt or ''} has {len(ids)} records; {n_candidates} candidates + "
                          f"{n_population} population{extra} requested")
    shuffled = _shuffled(ids, seed, salt)
    return shuffled[:n_candidates], shuffled[n_candidates:n_candidates + n_population]


def teacher_slice(record_ids: Sequence[str], n_candidates: int, n_population: int, n_teacher: int, seed: int,
                  salt: str = "") -> list[str]:
    """The `n_teacher` records that follow the candidates and population in `split_pool`'s shuffle:
    disjoint from both by construction."""
    split_pool(record_ids, n_candidates, n_population, seed, salt, n_teacher=n_teacher)
    start = n_candidates + n_population
    return _shuffled(sorted(set(record_ids)), seed, salt)[start:start + n_teacher]


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

    Why (bench/reference_confound.py): with few students a record's matched OUT reference is nearly forced for a
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


def keep_matrix_plan(pools: dict[str, Sequence[str]], *, n_students: int, n_candidates: int, n_population: int,
                     seed: int, null_student: bool = True, keep_design: str = "lira") -> MembershipPlan:
    """Study plan: for each domain, cut its pool into candidates and population, then a balanced keep matrix.

    Model ids: ``<domain>-s<j>`` for students, ``<domain>-null`` for the null student (trained on
    n_candidates/2 population records, i.e. as many records as each student, but none of them candidates).
    keep_design: 'lira' (``keep_matrix``) or 'balanced_subsets' (``balanced_subsets_keep_matrix``).
    """
    if keep_design not in KEEP_DESIGNS:
        raise ConfigError(f"plan.keep_design must be one of {KEEP_DESIGNS}, got {keep_design!r}")
    build = keep_matrix if keep_design == "lira" else balanced_subsets_keep_matrix
    rows, models, candidates, population = [], {}, {}, {}
    for domain in sorted(pools):
        cand, pop = split_pool(list(pools[domain]), n_candidates, n_population, seed, salt=domain)
        candidates[domain], population[domain] = cand, pop
        keep = build(n_students, len(cand), _stable_seed(seed, "keep", domain) % 2**32)
        for j in range(n_students):
            model_id = f"{domain}-s{j}"
            models[model_id] = {"domain": domain, "role": "student"}
            rows += [(rid, model_id, bool(keep[j, i])) for i, rid in enumerate(cand)]
        if null_student:
            model_id = f"{domain}-null"
            n_null = n_candidates // 2
            if n_null > len(pop):
                raise ConfigError(f"domain {domain}: the null student needs {n_null} population records, "
                                  f"only {len(pop)} set aside (raise n_population)")
            models[model_id] = {"domain": domain, "role": "null"}
            rows += [(rid, model_id, False) for rid in cand]
            rows += [(rid, model_id, True) for rid in pop[:n_null]]
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    params = {"n_students": n_students, "n_candidates": n_candidates, "n_population": n_population,
              "null_student": null_student}
    if keep_design != "lira":  # recorded only when not the default, so existing plans compare equal
        params["keep_design"] = keep_design
    return MembershipPlan("keep_matrix", seed, params, models, candidates, population, table)


def disjoint_plan(candidates: Sequence[str], population: Sequence[str], *, domain: str, n_references: int,
                  records_per_reference: int, seed: int) -> MembershipPlan:
    """Audit plan: `n_references` students trained on seeded subsets of `population`; no candidate is IN."""
    overlap = set(candidates) & set(population)
    if overlap:
        raise InputError(f"{len(overlap)} candidate records also appear in the population "
                         f"(e.g. {sorted(overlap)[0]}); references must exclude every candidate")
    if records_per_reference > len(population):
        raise ConfigError(f"records_per_reference={records_per_reference} exceeds the population "
                          f"({len(population)} records)")
    if n_references < 1:
        raise ConfigError("n_references must be >= 1")
    pop = sorted(population)
    rows, models = [], {}
    for k in range(n_references):
        model_id = f"{domain}-ref{k}"
        models[model_id] = {"domain": domain, "role": "reference"}
        rng = np.random.default_rng(_stable_seed(seed, "ref", domain, k))
        chosen = set(rng.choice(len(pop), size=records_per_reference, replace=False).tolist())
        rows += [(rid, model_id, False) for rid in candidates]
        rows += [(rid, model_id, i in chosen) for i, rid in enumerate(pop)]
    table = pd.DataFrame(rows, columns=["record_id", "model_id", "is_member"])
    params = {"n_references": n_references, "records_per_reference": records_per_reference}
    return MembershipPlan("disjoint", seed, params, models, {domain: list(candidates)},
                          {domain: list(population)}, table)
