"""Medical QA sources from the Hugging Face hub: MedQA (USMLE), MedMCQA, PubMedQA (pqa_labeled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leakaudit.data.hub_loading import FieldError, load_hub_records, require_text
from leakaudit.data.records import Record
from leakaudit.data.registry import register_source

LETTERS = "ABCD"
MCQ_INSTRUCTION = "Answer the following multiple-choice question. Explain your reasoning, then give the letter."


def mcq_prompt(question: str, options: dict[str, str]) -> str:
    lines = "\n".join(f"{key}. {text}" for key, text in options.items())
    return f"{MCQ_INSTRUCTION}\n\n{question}\n\nOptions:\n{lines}"


def medqa_options(row: dict[str, Any]) -> dict[str, str]:
    """MedQA options as {letter: text}; accepts a dict or a list of {key, value} pairs."""
    raw = row["options"]
    if isinstance(raw, list):
        raw = {item["key"]: item["value"] for item in raw}
    if not isinstance(raw, dict) or not raw:
        raise FieldError("options", "must be a non-empty mapping of letter to text")
    return {str(k): str(v) for k, v in sorted(raw.items()) if v is not None}


def medqa_row_to_record(row: dict[str, Any]) -> Record:
    """GBaker/MedQA-USMLE-4-options row (question, options, answer_idx, answer) -> Record; answer = letter."""
    question, options = require_text(row, "question"), medqa_options(row)
    letter = require_text(row, "answer_idx")
    if letter not in options:
        raise FieldError("answer_idx", f"{letter!r} is not one of the options {sorted(options)}")
    answer_text = str(row.get("answer") or options[letter]).strip()
    return Record(domain="medical", prompt=mcq_prompt(question, options),
                  privileged=f"The correct answer is {letter}. {answer_text}.", answer=letter, source="medqa",
                  meta={k: row[k] for k in ("meta_info",) if row.get(k)})


def medmcqa_row_to_record(row: dict[str, Any]) -> Record:
    """openlifescienceai/medmcqa row (question, opa..opd, cop 0-3, exp) -> Record; answer = letter."""
    question = require_text(row, "question")
    options = {letter: str(row[f"op{letter.lower()}"]) for letter in LETTERS}
    cop = row["cop"]
    if not isinstance(cop, int) or not 0 <= cop < len(LETTERS):
        raise FieldError("cop", f"must be 0-3 (index of the correct option), got {cop!r}")
    letter = LETTERS[cop]
    privileged = f"The correct answer is {letter}. {options[letter]}."
    if isinstance(row.get("exp"), str) and row["exp"].strip():
        privileged += f"\nExplanation: {row['exp'].strip()}"
    meta = {k: row[k] for k in ("id", "subject_name", "topic_name") if row.get(k)}
    return Record(domain="medical", prompt=mcq_prompt(question, options), privileged=privileged, answer=letter,
                  source="medmcqa", meta=meta)


def pubmedqa_row_to_record(row: dict[str, Any]) -> Record:
    """qiaojin/PubMedQA pqa_labeled row -> Record: privileged = the abstract's contexts + long answer."""
    question, decision = require_text(row, "question"), require_text(row, "final_decision")
    context = row["context"]
    if not isinstance(context, dict) or not context.get("contexts"):
        raise FieldError("context", "needs a non-empty 'contexts' list")
    labels = context.get("labels") or [None] * len(context["contexts"])
    paragraphs = [f"{label}: {text}" if label else text for label, text in zip(labels, context["contexts"])]
    privileged = ("Abstract:\n" + "\n".join(paragraphs) + f"\nConclusion: {require_text(row, 'long_answer')}\n"
                  f"Answer: {decision}")
    return Record(domain="medical", prompt=f"Answer yes, no or maybe, and explain why.\n\n{question}",
                  privileged=privileged, answer=decision, source="pubmedqa",
                  meta={k: row[k] for k in ("pubid",) if row.get(k) is not None})


@register_source("medqa", "MedQA USMLE 4-option questions from the hub (GBaker/MedQA-USMLE-4-options)")
def load_medqa(*, seed: int = 0, hub_id: str = "GBaker/MedQA-USMLE-4-options", config: str | None = None,
               split: str = "train", data_files: str | Path | None = None, path: str | Path | None = None,
               cache_dir: str | Path | None = None) -> list[Record]:
    return load_hub_records(medqa_row_to_record, hub_id=hub_id, config=config, split=split,
                            data_files=data_files or path, cache_dir=cache_dir)


@register_source("medmcqa", "MedMCQA questions with explanations from the hub (openlifescienceai/medmcqa)")
def load_medmcqa(*, seed: int = 0, hub_id: str = "openlifescienceai/medmcqa", config: str | None = None,
                 split: str = "train", data_files: str | Path | None = None, path: str | Path | None = None,
                 cache_dir: str | Path | None = None) -> list[Record]:
    return load_hub_records(medmcqa_row_to_record, hub_id=hub_id, config=config, split=split,
                            data_files=data_files or path, cache_dir=cache_dir)


@register_source("pubmedqa", "PubMedQA expert-labelled questions with abstracts from the hub "
                             "(qiaojin/PubMedQA, pqa_labeled)")
def load_pubmedqa(*, seed: int = 0, hub_id: str = "qiaojin/PubMedQA", config: str | None = "pqa_labeled",
                  split: str = "train", data_files: str | Path | None = None, path: str | Path | None = None,
                  cache_dir: str | Path | None = None) -> list[Record]:
    return load_hub_records(pubmedqa_row_to_record, hub_id=hub_id, config=config, split=split,
                            data_files=data_files or path, cache_dir=cache_dir)
