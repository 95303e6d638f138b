"""Pool slicing: the one place that knows the order a domain's record pool is cut in, and the seeds it is cut with.

A domain's pool is sorted, shuffled once with (seed, "split", domain), and cut into consecutive slices in
POOL_PARTS order: candidates, population, teacher-only records, background, reference-only records. Each slice
follows every earlier one, so asking for a later slice (a background set, reference-only records) moves no record
of an earlier one, and every slice is a function of the seed and the domain's name alone.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

import numpy as np

from leakaudit.errors import ConfigError, InputError

POOL_PARTS = ("candidates", "population", "teacher", "background", "reference")
"""The slices of a domain's shuffled pool, in the order they are cut."""
PART_WORDS = {"teacher": "teacher records", "background": "background records",
              "reference": "reference-only records"}
"""How an error names a slice after the candidates and the population ('+ 64 teacher records')."""


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from a tuple of values, stable across processes (unlike hash())."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def shuffled(ids: list[str], seed: int, salt: str) -> list[str]:
    """`ids` in the seeded order of (seed, "split", salt)."""
    order = np.random.default_rng(stable_seed(seed, "split", salt)).permutation(len(ids))
    return [ids[i] for i in order]


def _sorted_unique(record_ids: Sequence[str]) -> list[str]:
    ids = sorted(set(record_ids))
    if len(ids) != len(record_ids):
        raise InputError("duplicate record ids in the pool")
    return ids


def _check_size(n_ids: int, n_candidates: int, n_population: int, later: Mapping[str, int], salt: str) -> None:
    """ConfigError naming every part asked for when the pool is smaller than their sum."""
    if n_candidates + n_population + sum(later.values()) > n_ids:
        extra = "".join(f" + {n} {name}" for name, n in later.items() if n)
        raise ConfigError(f"pool {salt or ''} has {n_ids} records; {n_candidates} candidates + "
                          f"{n_population} population{extra} requested")


def slice_pool(record_ids: Sequence[str], sizes: Mapping[str, int], seed: int, salt: str = "") -> dict[str, list[str]]:
    """{part: record ids} for every part of POOL_PARTS (a part missing from `sizes` is empty): one seeded shuffle
    of the pool, cut in POOL_PARTS order. ConfigError when the pool holds fewer records than the parts ask for,
    InputError on a duplicate id."""
    unknown = set(sizes) - set(POOL_PARTS)
    if unknown:
        raise ValueError(f"unknown pool parts {sorted(unknown)}; parts are {POOL_PARTS}")
    ids = _sorted_unique(record_ids)
    _check_size(len(ids), sizes.get("candidates", 0), sizes.get("population", 0),
                {PART_WORDS[p]: sizes.get(p, 0) for p in POOL_PARTS[2:]}, salt)
    order = shuffled(ids, seed, salt)
    out, start = {}, 0
    for part in POOL_PARTS:
        n = sizes.get(part, 0)
        out[part] = order[start:start + n]
        start += n
    return out


# ---- the single-slice forms (callers that need one slice; each is slice_pool's) ----------------------------------
def split_pool(record_ids: Sequence[str], n_candidates: int, n_population: int, seed: int,
               salt: str = "", n_teacher: int = 0, parts: dict[str, int] | None = None) -> tuple[list[str], list[str]]:
    """(candidates, population): slice_pool's first two slices. `n_teacher` only checks that the pool also holds
    that many more records; `parts`, when given, names those records instead ({'teacher': 64, 'background': 32,
    ...}; their sum replaces n_teacher)."""
    ids = _sorted_unique(record_ids)
    named = parts if parts is not None else {"teacher": n_teacher}
    _check_size(len(ids), n_candidates, n_population, {f"{name} records": n for name, n in named.items()}, salt)
    cut = slice_pool(ids, {"candidates": n_candidates, "population": n_population}, seed, salt)
    return cut["candidates"], cut["population"]


def _one_slice(record_ids: Sequence[str], part: str, sizes: dict[str, int], seed: int, salt: str) -> list[str]:
    return slice_pool(record_ids, sizes, seed, salt)[part]


def teacher_slice(record_ids: Sequence[str], n_candidates: int, n_population: int, n_teacher: int, seed: int,
                  salt: str = "") -> list[str]:
    """The `n_teacher` records that follow the candidates and population: disjoint from both by construction."""
    return _one_slice(record_ids, "teacher", {"candidates": n_candidates, "population": n_population,
                                              "teacher": n_teacher}, seed, salt)


def background_slice(record_ids: Sequence[str], n_candidates: int, n_population: int, n_teacher: int,
                     n_background: int, seed: int, salt: str = "") -> list[str]:
    """The `n_background` records after the candidates, the population and the teacher records."""
    return _one_slice(record_ids, "background", {"candidates": n_candidates, "population": n_population,
                                                 "teacher": n_teacher, "background": n_background}, seed, salt)


def reference_slice(record_ids: Sequence[str], n_candidates: int, n_population: int, n_teacher: int,
                    n_background: int, n_reference: int, seed: int, salt: str = "") -> list[str]:
    """The `n_reference` records after the background: what offline references train on besides the background."""
    return _one_slice(record_ids, "reference", {"candidates": n_candidates, "population": n_population,
                                                "teacher": n_teacher, "background": n_background,
                                                "reference": n_reference}, seed, salt)
