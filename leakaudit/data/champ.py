"""CHAMP competition math (champ-dataset package, offline): problem -> worked solution -> final answer."""

from __future__ import annotations

from typing import Any

from leakaudit.data.records import Record
from leakaudit.data.registry import register_source

MATH_INSTRUCTION = "Solve the following problem. Show your reasoning, then give the final answer."


def champ_problem_to_record(problem: Any) -> Record:
    """One champ_dataset Problem -> Record (prompt: instruction + statement; privileged: numbered steps)."""
    steps = "\n".join(f"{i}. {step.text}" for i, step in enumerate(problem.solution.steps, start=1))
    privileged = f"Step-wise solution:\n{steps}\nFinal answer: {problem.answer}"
    return Record(domain="math", prompt=f"{MATH_INSTRUCTION}\n\n{problem.text}", privileged=privileged,
                  answer=problem.answer, source="champ",
                  meta={"problem_id": problem.identifier, "category": problem.category})


@register_source("champ", "CHAMP: 270 competition math problems with worked solutions (offline, champ-dataset)")
def load_champ(*, seed: int = 0, version: str = "v0") -> list[Record]:
    """All CHAMP problems in the package's order (seed unused: the set is fixed)."""
    import champ_dataset

    dataset = champ_dataset.load(version)
    return [champ_problem_to_record(p) for p in dataset.problems.values()]
