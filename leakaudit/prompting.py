"""How records become token ids: the student's view (prompt only) and the teacher's (prompt + privileged).

Training (shadow_models) and signals (leakaudit.signals) must encode prompts identically, so both call these.
"""

from __future__ import annotations

from typing import Any, Sequence

from leakaudit.data.records import Record

DEFAULT_TEACHER_TEMPLATE = (
    "{prompt}\n\n"
    "Here is privileged reference material for this task. Use it to answer, but do not mention it.\n"
    "<reference>\n{privileged}\n</reference>"
)


def student_messages(record: Record) -> list[dict[str, str]]:
    """The chat a deployed student sees: the prompt alone."""
    return [{"role": "user", "content": record.prompt}]


def teacher_messages(record: Record, template: str = DEFAULT_TEACHER_TEMPLATE) -> list[dict[str, str]]:
    """The teacher's chat: `template` filled with the record's prompt and privileged context."""
    return [{"role": "user", "content": template.format(prompt=record.prompt, privileged=record.privileged)}]


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Token ids of `messages` followed by the assistant generation prompt (plain text if no chat template)."""
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True,
                                            return_dict=True)
        return list(out["input_ids"])
    text = "\n\n".join(m["content"] for m in messages) + "\n\n"
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def student_prompt_ids(tokenizer: Any, record: Record) -> list[int]:
    return encode_chat(tokenizer, student_messages(record))


def teacher_prompt_ids(tokenizer: Any, record: Record, template: str = DEFAULT_TEACHER_TEMPLATE) -> list[int]:
    return encode_chat(tokenizer, teacher_messages(record, template))


def continuation_ids(tokenizer: Any, text: str) -> list[int]:
    """An answer as the teacher or a student would end it: the text's tokens, then EOS."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return ids


def reference_text_ids(tokenizer: Any, record: Record) -> list[int]:
    """The fixed reference continuation scored by fixed-text attacks: the privileged text, then EOS."""
    return continuation_ids(tokenizer, record.privileged)
