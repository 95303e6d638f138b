"""Code source from the Hugging Face hub: MBPP (description + tests -> reference program). Never executed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leakaudit.data.hub_loading import FieldError, load_hub_records, require_text
from leakaudit.data.records import Record
from leakaudit.data.registry import register_source


def mbpp_row_to_record(row: dict[str, Any]) -> Record:
    """MBPP row (text, code, test_list) -> Record; the prompt shows the asserts, as in the MBPP paper."""
    text, code = require_text(row, "text"), require_text(row, "code")
    tests = row["test_list"]
    if not isinstance(tests, list) or not tests:
        raise FieldError("test_list", "must be a non-empty list of assert statements")
    prompt = (f"You are an expert Python programmer, and here is your task: {text} "
              f"Your code should pass these tests:\n\n" + "\n".join(tests))
    return Record(domain="code", prompt=prompt, privileged=code.replace("\r\n", "\n") + "\n", answer=None,
                  source="mbpp", meta={k: row[k] for k in ("task_id",) if row.get(k) is not None})


@register_source("mbpp", "MBPP Python problems from the hub (google-research-datasets/mbpp, full)")
def load_mbpp(*, seed: int = 0, hub_id: str = "google-research-datasets/mbpp", config: str | None = "full",
              split: str = "train", data_files: str | Path | None = None, path: str | Path | None = None,
              cache_dir: str | Path | None = None) -> list[Record]:
    return load_hub_records(mbpp_row_to_record, hub_id=hub_id, config=config, split=split,
                            data_files=data_files or path, cache_dir=cache_dir)
