"""Permutation nulls: a one-sided test of several statistics under one set of relabellings, exact when there are
few distinct relabellings, else seeded draws."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from leakaudit.errors import InputError


def n_arrangements(codes) -> int:
    """How many distinct orderings the multiset `codes` has: n! / prod(m_c!) over the multiplicities m_c."""
    _, counts = np.unique(np.asarray(codes), return_counts=True)
    out, left = 1, int(counts.sum())
    for m in counts:
        out *= math.comb(left, int(m))
        left -= int(m)
    return out


def distinct_arrangements(codes) -> Iterator[np.ndarray]:
    """Every distinct ordering of the multiset `codes`, each once, in lexicographic order.

    Hand-written (the classical next-permutation step): itertools.permutations yields n! orderings, repeating each
    distinct one prod(m_c!) times, and neither numpy nor scipy enumerates the permutations of a multiset."""
    a = np.sort(np.asarray(codes))
    n = len(a)
    while True:
        yield a.copy()
        i = n - 2
        while i >= 0 and a[i] >= a[i + 1]:
            i -= 1
        if i < 0:
            return
        j = n - 1
        while a[j] <= a[i]:
            j -= 1
        a[i], a[j] = a[j], a[i]
        a[i + 1:] = a[i + 1:][::-1].copy()


@dataclass(frozen=True)
class PermutationNull:
    """A one-sided (greater) permutation test of K statistics sharing one set of relabellings.

    observed [K]; null [n, K] (one row per relabelling); p_value [K]; exact: the n rows are every distinct
    relabelling (p = share of them at or above the observed value, which includes the observed labelling), else
    n random ones (p = (1 + count) / (1 + n), Phipson & Smyth 2010, as scipy.stats.permutation_test); seed: the
    numpy Generator seed of the random relabellings (unused when exact)."""

    observed: np.ndarray
    null: np.ndarray
    p_value: np.ndarray
    exact: bool
    n: int
    seed: int

    def interval(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Central `level` interval of each statistic's null (numpy's default linear quantiles)."""
        tail = (1 - level) / 2
        return np.quantile(self.null, tail, axis=0), np.quantile(self.null, 1 - tail, axis=0)


def permutation_null(statistic: Callable[[list[np.ndarray]], Sequence[float]], codes: Sequence[np.ndarray],
                     observed, *, n_perm: int, seed: int, exact: bool | None = None) -> PermutationNull:
    """Null distribution of `statistic` when the items of each group are relabelled at random.

    codes: per group, an int array [n_g] (items with equal codes are interchangeable: e.g. candidates with the same
    column of the keep matrix). A relabelling permutes every group's codes independently; `statistic(arranged)`
    gets the list of permuted code arrays and returns K values. `observed` [K] is the statistic of the real labels.
    exact: enumerate every distinct relabelling (prod over groups of n_g! / prod m_c!); None = exactly when there
    are at most n_perm of them, else n_perm random permutations drawn from numpy's default_rng(seed).

    Hand-written rather than scipy.stats.permutation_test: one permutation of a domain's records must relabel all of
    its targets at once, domains may differ in size (scipy's 'pairings' needs equal-sized samples) and the
    statistic returns several values; scipy's exact mode would also enumerate all n! orderings instead of the
    distinct ones. The p-value and tie conventions are scipy's (tolerance 100 eps |observed|; +1 only when
    sampled); tests/test_blind_null.py checks the two agree on one target.
    """
    codes = [np.asarray(c) for c in codes]
    observed = np.atleast_1d(np.asarray(observed, dtype=np.float64))
    total = math.prod(n_arrangements(c) for c in codes)
    if exact is None:
        exact = total <= n_perm
    if exact:
        arrangements: Iterable = itertools.product(*(distinct_arrangements(c) for c in codes))
    else:
        if n_perm < 1:
            raise InputError(f"permutation_null: n_perm must be >= 1, got {n_perm}")
        rng = np.random.default_rng(seed)
        arrangements = ([c[rng.permutation(len(c))] for c in codes] for _ in range(n_perm))
    null = np.array([np.asarray(statistic(list(a)), dtype=np.float64).reshape(-1) for a in arrangements])
    null = null.reshape(len(null), len(observed))
    ge = (null >= observed - np.abs(observed) * 100 * np.finfo(np.float64).eps).sum(axis=0)
    adj = 0 if exact else 1
    p = np.clip((ge + adj) / (len(null) + adj), 0.0, 1.0)
    return PermutationNull(observed, null, p, bool(exact), len(null), seed)
