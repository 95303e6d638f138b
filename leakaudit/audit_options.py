"""The audit's options: one table from each `leakaudit audit` flag to the config key it sets.

The study config's `audit` section (leakaudit.audit_config.AuditConfig) is made from these flags alone, so each of
its keys has exactly one flag, and the three places that name an option read them from here:
    the CLI         declares each option with `flag_for(key)`, its parameter named as the key's field;
    the config      AuditConfig's messages name the key (`audit.n_references: must be >= 1`), right for a YAML file;
    the errors      `flag_named` rewrites those keys into the flags an auditor typed (`--train-references: ...`),
                    and the API target's run-time errors name their flag with `flag_for`.
Imports nothing: the CLI reads it when it builds its parser, before anything heavy is loaded.
"""

from __future__ import annotations

import re

AUDIT_OPTIONS: dict[str, str] = {
    "--target": "audit.target",
    "--target-model": "audit.target_model",
    "--api-key-env": "audit.api_key_env",
    "--api-concurrency": "audit.api_concurrency",
    "--api-timeout": "audit.api_timeout_s",
    "--api-retries": "audit.api_max_retries",
    "--candidates": "audit.candidates",
    "--population": "audit.population",
    "--background": "audit.background",
    "--references": "audit.references",
    "--train-references": "audit.n_references",
    "--null-sample": "audit.null_sample",
    "--null-size": "audit.null_size",
    "--fdr": "audit.fdr",
    "--fpr": "audit.fpr",
    "--prompt-column": "audit.prompt_column",
    "--privileged-column": "audit.privileged_column",
    "--id-column": "audit.id_column",
    "--domain": "audit.domain",
}
"""`leakaudit audit` flag -> the dotted config key it sets. Every key of the audit section but
`records_per_reference` (set in a config file only) has a row."""

_FLAGS = {key: flag for flag, key in AUDIT_OPTIONS.items()}
_KEY = re.compile(r"\baudit\.[a-z_]+\b")


def flag_for(key: str) -> str:
    """The flag that sets dotted config `key` ('audit.n_references' -> '--train-references')."""
    return _FLAGS[key]


def flag_named(message: str, out: object) -> str:
    """An error message about an audit's config, as the auditor typed it: every audit key in it replaced by its flag
    ('audit.n_references: must be >= 1' -> '--train-references: must be >= 1'), and a leading 'name:' (the run
    directory's name, from --out) by '--out <out>:'."""
    message = _KEY.sub(lambda m: _FLAGS.get(m.group(), m.group()), message)
    key, sep, rest = message.partition(":")
    return f"--out {out}:{rest}" if sep and key == "name" else message
