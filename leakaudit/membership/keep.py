"""Keep matrices: which of M models train on each of N candidates (True = IN), and the checks on M and N.

Every candidate is IN for exactly M/2 models. `keep_matrix` is LiRA's construction (Carlini et al. 2022,
tensorflow/privacy research/mi_lira_2021/train.py: ``keep = rng.uniform(size=(M, N)).argsort(0) < M/2``) rebalanced
so every model has N/2 members; `balanced_subsets_keep_matrix` uses every IN-set of size M/2 equally often.
"""

from __future__ import annotations

import numpy as np

from leakaudit.errors import ConfigError


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
