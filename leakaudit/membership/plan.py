"""MembershipPlan: a saved plan (which model trains on which record) and the queries every stage asks of it.

The plan is the one place that answers "which references, IN and OUT, score record r for target t"
(`MembershipPlan.matched_references`, over the keep matrix held as a bool array, `MembershipPlan.keep`). The plans
are built by leakaudit.membership.builders; the designs are described in leakaudit.membership.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
import numpy as np
import pandas as pd

from leakaudit.errors import ConfigError, InputError
from leakaudit.io import atomic_path, read_json, write_json
from leakaudit.membership.slices import stable_seed

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
                rng = np.random.default_rng(stable_seed(self.seed, view.target, rid, str(member)))
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

