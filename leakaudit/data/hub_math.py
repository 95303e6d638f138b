"""Math sources from the Hugging Face hub: GSM8K and MATH (problem -> worked solution -> final answer)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from leakaudit.data.champ import MATH_INSTRUCTION
from leakaudit.data.hub_loading import FieldError, load_hub_records, require_text
from leakaudit.data.records import Record
from leakaudit.data.registry import register_source

CALCULATOR_ANNOTATION = re.compile(r"<<[^<>]*>>")


def gsm8k_row_to_record(row: dict[str, Any]) -> Record:
    """GSM8K row (question, answer ending in '#### final') -> Record; calculator annotations <<..>> removed."""
    question, answer_text = require_text(row, "question"), require_text(row, "answer")
    if "####" not in answer_text:
        raise FieldError("answer", "has no '#### <final answer>' line")
    reasoning, final = answer_text.rsplit("####", 1)
    final = final.strip().replace(",", "")
    reasoning = CALCULATOR_ANNOTATION.sub("", reasoning).strip()
    return Record(domain="math", prompt=f"{MATH_INSTRUCTION}\n\n{question}",
                  privileged=f"{reasoning}\nFinal answer: {final}", answer=final, source="gsm8k")


def last_boxed(text: str) -> str | None:
    r"""Contents of the last \boxed{...} (or \fbox{...}) in `text`, braces matched; None if there is none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i].strip()
        i += 1
    return None


def math_row_to_record(row: dict[str, Any]) -> Record:
    r"""MATH row (problem, solution with \boxed{answer}; level/type or subject kept in meta) -> Record."""
    problem, solution = require_text(row, "problem"), require_text(row, "solution")
    answer = last_boxed(solution) or (str(row["answer"]).strip() if row.get("answer") else None)
    if not answer:
        raise FieldError("solution", "has no \\boxed{...} answer")
    meta = {k: row[k] for k in ("level", "type", "subject", "unique_id") if row.get(k) is not None}
    return Record(domain="math", prompt=f"{MATH_INSTRUCTION}\n\n{problem}", privileged=solution, answer=answer,
                  source="math", meta=meta)


@register_source("gsm8k", "GSM8K grade-school math from the hub (openai/gsm8k; data_files= for a local copy)")
def load_gsm8k(*, seed: int = 0, hub_id: str = "openai/gsm8k", config: str | None = "main", split: str = "train",
               data_files: str | Path | None = None, path: str | Path | None = None,
               cache_dir: str | Path | None = None) -> list[Record]:
    """GSM8K rows in dataset order."""
    return load_hub_records(gsm8k_row_to_record, hub_id=hub_id, config=config, split=split,
                            data_files=data_files or path, cache_dir=cache_dir)


@register_source("math", "MATH competition problems from the hub (HuggingFaceH4/MATH-500, or "
                         "EleutherAI/hendrycks_math with config=<subject>)")
def load_math(*, seed: int = 0, hub_id: str = "HuggingFaceH4/MATH-500", config: str | None = None,
              split: str = "test", data_files: str | Path | None = None, path: str | Path | None = None,
              cache_dir: str | Path | None = None) -> list[Record]:
    """MATH rows in dataset order; answer = the last \\boxed{} of the solution."""
    return load_hub_records(math_row_to_record, hub_id=hub_id, config=config, split=split,
                            data_files=data_files or path, cache_dir=cache_dir)
