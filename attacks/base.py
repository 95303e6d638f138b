"""What every attack reads: `AttackInputs`, one target's signals for N candidate records; plus shared checks.

Shapes (N candidates, n_i fresh trajectories of record i, T tokens — ragged, may differ between
trajectories of one record —, R/R2/R3 reference students, Z population records). Every log-prob is a natural
log, per token, teacher-forced.

    record_ids          list[str]                  [N]          unique
    texts               list[str]                  [N]          the record's privileged (reference) text
    fresh_target        list[list[ndarray]]        [N][n_i][T]  log p_target of the target's own fresh samples
    fresh_refs          list[list[ndarray]]        [N][n_i][R, T]  same tokens under the record's matched OUT refs
    fresh_base          list[list[ndarray]]        [N][n_i][T]  same tokens under the base model
    fixed_target        list[ndarray]              [N][T]       the record's reference text under the target
    fixed_target_mu     list[ndarray]              [N][T]       E_{v~p(.|prefix)} log p(v) at each position
    fixed_target_sigma  list[ndarray]              [N][T]       its standard deviation (Min-K%++), >= 0
    fixed_base          list[ndarray]              [N][T]       the reference text under the base model
    fixed_refs          list[ndarray]              [N][R2, T]   under the record's IN and OUT references
    fixed_ref_in        list[ndarray]              [N][R2]      bool: that reference trained on the record
    fixed_ref_cols      list[ndarray]              [N][R2]      int: the population_refs column of that reference
    population_target   ndarray                    [Z]          mean log p of each population text, target
    population_refs     ndarray                    [Z, R3]      the same under every reference student
    labels              ndarray                    [N]          0/1 membership; read ONLY by `blind_text`

fixed_ref_cols ties the two reference layouts together: row r of fixed_refs[i] and column fixed_ref_cols[i][r]
of population_refs are the same reference model, so an attack that compares a record with population records
(RMIA) can use the record's own reference models on both sides. Integers in [0, R3), no repeats within a
record.

Any field except `record_ids` may be None when the pipeline did not compute it; `run_attack` checks the
attack's declared needs and raises `AttackInputError` naming the missing field, and hands the attack a copy of the
inputs in which every field outside its needs is None (so no attack can read `labels`, say, unless it declares
it). `validate(fields)` checks lengths, shapes and finiteness and names the offending record_id and field.

Sign convention: every attack returns float64 [N], higher = more likely member.

NaN policy: an empty trajectory (T = 0) contributes nothing to its record's score (it is skipped, not
counted as zero); a record with no scored tokens at all (every trajectory empty, or an empty reference text)
gets NaN. The runner keeps NaN; metrics rank NaN lowest and report how many there were. Non-finite log-probs
in the inputs are an input error (`validate`), never silently dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Iterable, Sequence

import numpy as np

from attacks.errors import AttackConfigError, AttackInputError

FRESH_FIELDS = ("fresh_target", "fresh_refs", "fresh_base")
FIXED_PER_TOKEN = ("fixed_target", "fixed_target_mu", "fixed_target_sigma", "fixed_base")
INPUT_FIELDS = ("texts", *FRESH_FIELDS, *FIXED_PER_TOKEN, "fixed_refs", "fixed_ref_in", "fixed_ref_cols",
                "population_target", "population_refs", "labels")


@dataclass
class AttackInputs:
    """One target's signals for N candidate records (see the module docstring for shapes and NaN policy)."""

    record_ids: list[str]
    """Candidate record ids, [N], unique; every other per-record field is aligned with it."""
    texts: list[str] | None = None
    """The privileged text of each record (what the fixed signals score), [N]."""
    fresh_target: list[list[np.ndarray]] | None = None
    """[N][n_i][T]: log p_target of each fresh trajectory the target sampled for the record."""
    fresh_refs: list[list[np.ndarray]] | None = None
    """[N][n_i][R, T]: the same tokens under the record's R matched OUT references."""
    fresh_base: list[list[np.ndarray]] | None = None
    """[N][n_i][T]: the same tokens under the base model."""
    fixed_target: list[np.ndarray] | None = None
    """[N][T]: the record's reference text under the target."""
    fixed_target_mu: list[np.ndarray] | None = None
    """[N][T]: expected log-prob under the target's next-token distribution at each position (Min-K%++)."""
    fixed_target_sigma: list[np.ndarray] | None = None
    """[N][T]: standard deviation of that log-prob (Min-K%++), >= 0."""
    fixed_base: list[np.ndarray] | None = None
    """[N][T]: the reference text under the base model."""
    fixed_refs: list[np.ndarray] | None = None
    """[N][R2, T]: the reference text under the record's IN and OUT reference students."""
    fixed_ref_in: list[np.ndarray] | None = None
    """[N][R2] bool: whether each of those references trained on the record."""
    fixed_ref_cols: list[np.ndarray] | None = None
    """[N][R2] int: for each row of fixed_refs[i], the column of population_refs holding the same reference model."""
    population_target: np.ndarray | None = None
    """[Z]: mean log-prob of each population record's reference text under the target."""
    population_refs: np.ndarray | None = None
    """[Z, R3]: the same under every reference student (population records are OUT for all of them)."""
    labels: np.ndarray | None = None
    """[N] 0/1 membership in the target. Read ONLY by the cross-validated blind text baseline."""

    @property
    def n(self) -> int:
        return len(self.record_ids)

    def missing(self, names: Iterable[str]) -> list[str]:
        """The fields among `names` that are None."""
        return [f for f in names if getattr(self, f) is None]

    def validate(self, names: Iterable[str] | None = None) -> None:
        """Check lengths, shapes and finiteness of `names` (default: every field that is not None).

        Raises AttackInputError naming the field and, for per-record problems, the record_id.
        """
        ids = self.record_ids
        if ids is None or isinstance(ids, str):
            raise AttackInputError("record_ids must be a list of strings", field="record_ids")
        seen: set[str] = set()
        for rid in ids:
            if rid in seen:
                raise AttackInputError("duplicate record_id", record_id=str(rid), field="record_ids")
            seen.add(rid)
        selected = INPUT_FIELDS if names is None else tuple(names)
        unknown = [f for f in selected if f not in INPUT_FIELDS]
        if unknown:
            raise AttackInputError(f"unknown AttackInputs field(s) {unknown}")
        present = [f for f in selected if getattr(self, f) is not None]
        for name in present:
            value = getattr(self, name)
            if name in ("population_target", "population_refs"):
                continue
            if len(value) != self.n:
                raise AttackInputError(f"has {len(value)} entries for {self.n} record_ids", field=name)
        for name in present:
            getattr(self, f"_check_{name}")()

    # -- per-field checks (each may assume the field is not None and has N entries) --------------------

    def _fail(self, i: int, name: str, msg: str) -> None:
        raise AttackInputError(msg, record_id=str(self.record_ids[i]), field=name)

    def _check_texts(self) -> None:
        for i, t in enumerate(self.texts):
            if not isinstance(t, str):
                self._fail(i, "texts", f"expected a str, got {type(t).__name__}")

    def _check_labels(self) -> None:
        lab = np.asarray(self.labels)
        if lab.ndim != 1 or not np.isin(lab, (0, 1)).all():
            raise AttackInputError("labels must be a 1-D array of 0/1 (or bool)", field="labels")

    def _trajectories(self, name: str) -> list[list[np.ndarray]]:
        value = getattr(self, name)
        for i, trajs in enumerate(value):
            if isinstance(trajs, np.ndarray) or not isinstance(trajs, Sequence):
                self._fail(i, name, "expected a list of per-trajectory arrays")
        return value

    def _check_fresh_target(self) -> None:
        for i, trajs in enumerate(self._trajectories("fresh_target")):
            for j, a in enumerate(trajs):
                _check_logp(self, i, "fresh_target", a, ndim=1, what=f"trajectory {j}")

    def _check_fresh_base(self) -> None:
        for i, trajs in enumerate(self._trajectories("fresh_base")):
            for j, a in enumerate(trajs):
                _check_logp(self, i, "fresh_base", a, ndim=1, what=f"trajectory {j}")
                self._match_target_traj(i, j, "fresh_base", np.shape(a)[0])

    def _check_fresh_refs(self) -> None:
        for i, trajs in enumerate(self._trajectories("fresh_refs")):
            r_seen = None
            for j, a in enumerate(trajs):
                _check_logp(self, i, "fresh_refs", a, ndim=2, what=f"trajectory {j}")
                r = np.shape(a)[0]
                if r < 1:
                    self._fail(i, "fresh_refs", f"trajectory {j} has no reference rows")
                if r_seen is not None and r != r_seen:
                    self._fail(i, "fresh_refs", f"trajectory {j} has {r} references, an earlier one {r_seen}")
                r_seen = r
                self._match_target_traj(i, j, "fresh_refs", np.shape(a)[1])

    def _match_target_traj(self, i: int, j: int, name: str, t: int) -> None:
        if self.fresh_target is None:
            return
        trajs = self.fresh_target[i]
        if len(getattr(self, name)[i]) != len(trajs):
            self._fail(i, name, f"has {len(getattr(self, name)[i])} trajectories, fresh_target {len(trajs)}")
        if t != np.shape(trajs[j])[0]:
            self._fail(i, name, f"trajectory {j} has {t} tokens, fresh_target {np.shape(trajs[j])[0]}")

    def _check_fixed(self, name: str) -> None:
        for i, a in enumerate(getattr(self, name)):
            _check_logp(self, i, name, a, ndim=1)
            if name != "fixed_target" and self.fixed_target is not None:
                if np.shape(a)[0] != np.shape(self.fixed_target[i])[0]:
                    self._fail(i, name, f"has {np.shape(a)[0]} tokens, fixed_target "
                                        f"{np.shape(self.fixed_target[i])[0]}")

    def _check_fixed_target(self) -> None:
        self._check_fixed("fixed_target")

    def _check_fixed_target_mu(self) -> None:
        self._check_fixed("fixed_target_mu")

    def _check_fixed_target_sigma(self) -> None:
        self._check_fixed("fixed_target_sigma")
        for i, a in enumerate(self.fixed_target_sigma):
            if (np.asarray(a) < 0).any():
                self._fail(i, "fixed_target_sigma", "has negative standard deviations")

    def _check_fixed_base(self) -> None:
        self._check_fixed("fixed_base")

    def _check_fixed_refs(self) -> None:
        for i, a in enumerate(self.fixed_refs):
            _check_logp(self, i, "fixed_refs", a, ndim=2)
            if self.fixed_target is not None and np.shape(a)[1] != np.shape(self.fixed_target[i])[0]:
                self._fail(i, "fixed_refs", f"has {np.shape(a)[1]} tokens, fixed_target "
                                            f"{np.shape(self.fixed_target[i])[0]}")

    def _check_fixed_ref_in(self) -> None:
        for i, a in enumerate(self.fixed_ref_in):
            a = np.asarray(a)
            if a.ndim != 1 or a.dtype != bool:
                self._fail(i, "fixed_ref_in", f"expected a 1-D bool array, got shape {a.shape} dtype {a.dtype}")
            if self.fixed_refs is not None and a.shape[0] != np.shape(self.fixed_refs[i])[0]:
                self._fail(i, "fixed_ref_in", f"has {a.shape[0]} flags for {np.shape(self.fixed_refs[i])[0]} "
                                              "fixed_refs rows")

    def _check_fixed_ref_cols(self) -> None:
        n_cols = None
        if self.population_refs is not None and np.ndim(self.population_refs) == 2:
            n_cols = np.shape(self.population_refs)[1]
        for i, a in enumerate(self.fixed_ref_cols):
            a = np.asarray(a)
            if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
                self._fail(i, "fixed_ref_cols", f"expected a 1-D integer array, got shape {a.shape} dtype {a.dtype}")
            if self.fixed_refs is not None and a.shape[0] != np.shape(self.fixed_refs[i])[0]:
                self._fail(i, "fixed_ref_cols", f"has {a.shape[0]} columns for {np.shape(self.fixed_refs[i])[0]} "
                                                "fixed_refs rows")
            if (a < 0).any() or (n_cols is not None and (a >= n_cols).any()):
                bound = f"[0, {n_cols})" if n_cols is not None else ">= 0"
                self._fail(i, "fixed_ref_cols", f"has columns {a.tolist()} outside {bound} (population_refs "
                                                "columns)")
            if np.unique(a).size != a.size:
                self._fail(i, "fixed_ref_cols", f"names a population_refs column twice: {a.tolist()}")

    def _check_population_target(self) -> None:
        a = np.asarray(self.population_target)
        if a.ndim != 1 or a.shape[0] == 0 or not np.issubdtype(a.dtype, np.floating):
            raise AttackInputError(f"expected a non-empty 1-D float array, got shape {a.shape} (RMIA needs population "
                             "records: data.n_population > 0; leave the field None when there are none)",
                             field="population_target")
        if not np.isfinite(a).all():
            raise AttackInputError("has non-finite values", field="population_target")

    def _check_population_refs(self) -> None:
        a = np.asarray(self.population_refs)
        if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0 or not np.issubdtype(a.dtype, np.floating):
            raise AttackInputError(f"expected a non-empty [Z, R3] float array, got shape {a.shape}",
                             field="population_refs")
        if not np.isfinite(a).all():
            raise AttackInputError("has non-finite values", field="population_refs")
        if self.population_target is not None and a.shape[0] != np.shape(self.population_target)[0]:
            raise AttackInputError(f"has {a.shape[0]} rows, population_target {np.shape(self.population_target)[0]}",
                             field="population_refs")


def _check_logp(inputs: AttackInputs, i: int, name: str, a: Any, *, ndim: int, what: str = "") -> None:
    prefix = f"{what}: " if what else ""
    if not isinstance(a, np.ndarray) or a.ndim != ndim or not np.issubdtype(a.dtype, np.floating):
        shape = getattr(a, "shape", None)
        inputs._fail(i, name, f"{prefix}expected a {ndim}-D float array, got {type(a).__name__} shape {shape}")
    if not np.isfinite(a).all():
        inputs._fail(i, name, f"{prefix}has non-finite values")


# -- parameter checks shared by the parameter dataclasses ----------------------------------------------


def check_range(where: str, value: Any, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hi_open: bool = False, integer: bool = False) -> None:
    """Raise AttackConfigError unless `value` is a real (or integer) number in the interval."""
    ok_type = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if isinstance(value, bool) or not ok_type or (not integer and not math.isfinite(value)):
        raise AttackConfigError(f"{where} must be {'an integer' if integer else 'a finite number'}, got {value!r}")
    below = lo is not None and (value <= lo if lo_open else value < lo)
    above = hi is not None and (value >= hi if hi_open else value > hi)
    if below or above:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise AttackConfigError(f"{where} must be in {left}{'-inf' if lo is None else lo}, "
                          f"{'inf' if hi is None else hi}{right}, got {value!r}")


def check_choice(where: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise AttackConfigError(f"{where} must be one of {list(choices)}, got {value!r}")


def check_bool(where: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise AttackConfigError(f"{where} must be true or false, got {value!r}")


@dataclass(frozen=True)
class NoParams:
    """For attacks that take no parameters."""


def params_dict(params: Any) -> dict[str, Any]:
    """A parameters dataclass as a plain dict (what scores.parquet stores as json)."""
    return {f.name: getattr(params, f.name) for f in fields(params)}


@dataclass(frozen=True)
class FreshParams:
    """Parameters of the same-trajectory baselines (fresh_loss, fresh_gap_*)."""

    max_tokens: int | None = None
    """Score only the first K tokens of each trajectory (None = all); use the same K as `leaky` to compare."""

    def __post_init__(self) -> None:
        check_max_tokens("max_tokens", self.max_tokens)


def check_max_tokens(where: str, value: Any) -> None:
    if value is not None:
        check_range(where, value, 1, None, integer=True)
