"""The study config's `audit` section: what `leakaudit audit` was asked (the target, the candidates, how references
are made, how the verdict is drawn, how an API target is reached).

Beside leakaudit.audit, which builds it from the command's flags (one flag per key: leakaudit.audit_options, which
also turns the keys its messages name into those flags); validated with the rest of the study config by
leakaudit.config (which re-exports it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leakaudit.config_section import FORBID
from leakaudit.errors import ConfigError


@dataclass
class AuditConfig:
    """Present for `leakaudit audit`: the target is given, the references are trained on (or given as) models that
    never saw a candidate. Each key is set by one flag (leakaudit.audit_options); the messages name the key."""

    __pydantic_config__ = FORBID

    target: str
    """The deployed student: a directory or hub id (non-empty)."""
    candidates: str
    """JSONL of candidate records (non-empty path)."""
    population: str | None = None
    """JSONL of population records (never candidates); needed to train references."""
    references: list[str] = field(default_factory=list)
    """Existing reference students (trained without any candidate); empty = train n_references."""
    background: str | None = None
    """JSONL of records every trained reference trains on besides its population records: the target's background
    set, when the auditor knows it (the same recipe as the target: candidates a minority of a reference's
    training set, as of the target's). Must exclude every candidate and every population record; null = none."""
    n_references: int = 4
    """Reference students to train when `references` is empty. >= 1."""
    records_per_reference: int = 0
    """Population records each trained reference sees. >= 0; 0 = half the population (at least 1)."""
    null_sample: str | None = None
    """Records known not to have been handed to the teacher, drawn like the candidates, that no reference trains on:
    the verdict's null sample (leakaudit.verdict). null = split one off the population (`null_size`)."""
    null_size: int = 0
    """Population records split off as the null sample when `null_sample` is null. >= 0; 0 = the default,
    leakaudit.pipeline.audit_plan.default_null_size: enough for p = 0.01 (99 records) where the population allows, else half of
    it. Costs sampling and scoring of these records by the target and every reference, no training."""
    fdr: float = 0.1
    """The flagged list's false discovery rate (Benjamini-Hochberg over the candidates' conformal p-values), in
    (0, 1); ignored when `fpr` is set."""
    fpr: float | None = None
    """Flag each candidate with p <= fpr instead (a per-candidate false positive rate), in (0, 1); null = use fdr."""
    prompt_column: str | None = None
    """The column holding the prompt in every audit source (leakaudit.data.audit_inputs); null = 'prompt'."""
    privileged_column: str | None = None
    """The column holding the privileged text; null = 'privileged'."""
    id_column: str | None = None
    """The column holding the record id; null = 'record_id' when present, else a content hash."""
    domain: str | None = None
    """The domain of rows without a domain column; null = 'general'."""
    # ---- an API target: `target` is http(s)://HOST:PORT/v1, an OpenAI-compatible completions server
    target_model: str | None = None
    """The served model's name (required when `target` is a URL, refused otherwise)."""
    api_key_env: str | None = None
    """Environment variable holding the API key (its value is never logged or written). None = OPENAI_API_KEY
    when that is set, else no key; '' = no key; a name = that variable, which must be set."""
    api_concurrency: int = 4
    """Requests in flight at once (>= 1)."""
    api_timeout_s: float = 60.0
    """Seconds one request attempt may take (> 0)."""
    api_max_retries: int = 4
    """Retries on 429 / 5xx / timeouts / connection errors / malformed bodies (>= 0), exponential backoff."""

    def __post_init__(self) -> None:
        for name in ("target", "candidates"):
            if not getattr(self, name).strip():
                raise ConfigError(f"audit.{name}: must be a non-empty string")
        from leakaudit.signals.api_client import check_base_url, is_api_target

        if is_api_target(self.target):
            check_base_url(self.target)
            if not (self.target_model or "").strip():
                raise ConfigError("audit.target_model: required when audit.target is an API URL (the served model's "
                                  "name, as GET /v1/models lists it)")
        elif self.target_model is not None:
            raise ConfigError("audit.target_model: only for an API target (audit.target set to http://HOST:PORT/v1)")
        if self.api_concurrency < 1:
            raise ConfigError(f"audit.api_concurrency: must be >= 1, got {self.api_concurrency}")
        if not self.api_timeout_s > 0:
            raise ConfigError(f"audit.api_timeout_s: must be > 0, got {self.api_timeout_s}")
        if self.api_max_retries < 0:
            raise ConfigError(f"audit.api_max_retries: must be >= 0, got {self.api_max_retries}")
        for name in ("population", "background"):
            if getattr(self, name) is not None and not getattr(self, name).strip():
                raise ConfigError(f"audit.{name}: must be a non-empty path or null")
        if self.background is not None and self.references:
            raise ConfigError("audit.background: only for references trained here (not with audit.references)")
        for i, ref in enumerate(self.references):
            if not ref.strip():
                raise ConfigError(f"audit.references[{i}]: must be a non-empty string")
        if self.n_references < 1:
            raise ConfigError(f"audit.n_references: must be >= 1, got {self.n_references}")
        if self.records_per_reference < 0:
            raise ConfigError(f"audit.records_per_reference: must be >= 0, got {self.records_per_reference}")
        if self.null_sample is not None and not self.null_sample.strip():
            raise ConfigError("audit.null_sample: must be a non-empty path or null")
        if self.null_size < 0:
            raise ConfigError(f"audit.null_size: must be >= 0, got {self.null_size}")
        if not 0 < self.fdr < 1:
            raise ConfigError(f"audit.fdr: must be in (0, 1), got {self.fdr}")
        if self.fpr is not None and not 0 < self.fpr < 1:
            raise ConfigError(f"audit.fpr: must be in (0, 1), got {self.fpr}")
        for name in ("prompt_column", "privileged_column", "id_column", "domain"):
            if getattr(self, name) is not None and not getattr(self, name).strip():
                raise ConfigError(f"audit.{name}: must be a non-empty string or null")
