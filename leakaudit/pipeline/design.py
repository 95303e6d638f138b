"""A design: what a run is made of, as opposed to how its stages run (leakaudit.pipeline.runner).

Two designs: the keep-matrix study (leakaudit.pipeline.study_design) and the disjoint audit
(leakaudit.pipeline.audit_design). A design says which records the run takes and which plan it makes of them
(`inputs`, in memory, before anything is written), which models it is given rather than trains (`given_targets`,
`given_models`), what it checks of the config, what the run says when it starts, and what the attacks and report
stages write beside the common outputs (`write_scores`, `verdict_page`). The hooks' defaults here are "nothing
extra"; a design overrides what it adds. Which models are trained is one rule for both (`trained_models`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leakaudit.data.records import Record, normalise_id
from leakaudit.errors import InputError
from leakaudit.io import atomic_path, write_json
from leakaudit.membership import MembershipPlan
from leakaudit.pipeline.context import RunContext
from leakaudit.pipeline.targets import Target

TRAINED_ROLES = ("student", "null", "reference", "offline")
"""Plan roles this run trains (a model with a `path` in the plan is given, not trained)."""


@dataclass(frozen=True)
class Inputs:
    """A run's inputs, built in memory before its first file: every record its models train on or score (in
    records.jsonl order), the records set aside for preparing the teacher, and the plan."""

    records: list[Record]
    teacher_records: list[Record]
    plan: MembershipPlan


def trained_models(plan: MembershipPlan) -> list[str]:
    """Plan models a run trains (students, null students, offline references, references it is not given)."""
    return [m for m, info in plan.models.items() if info["role"] in TRAINED_ROLES and "path" not in info]


def unique_by_id(records: list[Record]) -> dict[str, Record]:
    """{record_id: record} over every domain's records; InputError when two records share an id (ids are checked
    unique within a domain's pool; across domains a later one silently replaced an earlier one, so a candidate's id
    could name another domain's background record)."""
    out: dict[str, Record] = {}
    for r in records:
        first = out.setdefault(normalise_id(r.record_id), r)
        if first is not r:
            raise InputError(f"two records share this id (domains {first.domain!r} and {r.domain!r}); record ids "
                             "must be unique across a study's domains", record_id=r.record_id, field="record_id")
    return {r.record_id: r for r in out.values()}


class Design:
    """The hooks a runner calls. `kind`: 'study' or 'audit' (what a run directory holding it is called in errors,
    and what leakaudit.cost reads)."""

    kind = ""

    def inputs(self, ctx: RunContext) -> Inputs:
        """Load and check the run's records and build its plan, in memory (InputError / ConfigError: exit 2)."""
        raise NotImplementedError

    def given_targets(self, cfg: Any) -> dict[str, Target]:
        """Targets the run is given rather than trains, by model id."""
        return {}

    def given_models(self, cfg: Any) -> dict[str, str]:
        """Other model references the run is given (their content digests are stage inputs), by error key."""
        return {}

    def check_config(self, cfg: Any) -> None:
        """What the design needs of the config beyond its own validation (ConfigError)."""

    def start_lines(self, ctx: RunContext) -> list[str]:
        """Lines logged when the run starts."""
        return []

    def write_scores(self, ctx: RunContext, scores: Any, leak_map: dict | None) -> None:
        """The attacks stage's outputs: scores.parquet and leak_map.json (a design may add its own)."""
        with atomic_path(ctx.run.scores) as tmp:
            scores.to_parquet(tmp, index=False)
        if leak_map is not None:
            write_json(ctx.run.leak_map, leak_map)

    def verdict_page(self, ctx: RunContext) -> str | None:
        """report.html when the scores carry no labels of both classes (no metrics); None: no page."""
        return None
