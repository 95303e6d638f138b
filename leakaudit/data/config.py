"""The study config's `data` section: where each domain's records come from and how many of them each role takes.

Beside the sources it names (leakaudit.data.sources), validated with the rest of the study config by
leakaudit.config (which re-exports these classes). Nothing is loaded here: a source and its option names are checked
against the source registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import StrictBool

from leakaudit.config_section import FORBID, Checked
from leakaudit.errors import ConfigError
from leakaudit.rundir import check_safe_name


@dataclass
class DomainSource:
    """Where one domain's records come from."""

    __pydantic_config__ = FORBID

    source: str
    """A name from `leakaudit records --list` (champ, humaneval, medical, gsm8k, file, ...)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options for the source (e.g. tables for medical, path and columns for file)."""

    def __post_init__(self) -> None:
        from leakaudit.data.sources import available_sources, check_source_options

        known = available_sources()
        if self.source not in known:
            raise ConfigError(f"source: unknown data source {self.source!r}; known: {', '.join(known)}")
        check_source_options(self.source, self.options)  # names only: nothing is loaded


@dataclass
class DataConfig:
    __pydantic_config__ = FORBID

    domains: dict[str, Checked[DomainSource]]
    """Domain name -> source. Every domain gets its own students and targets."""
    n_candidates: int = 16
    """Candidate records per domain; each is IN for half of that domain's students."""
    n_population: int = 16
    """Records per domain never trained on by any student (null student, RMIA population, teacher prep)."""
    n_teacher_records: int = 0
    """Extra records per domain for preparing the teacher only (teacher.kind: prepared or restated): disjoint from the
    candidates and the population, never trained on by a student, never scored. A teacher that has learnt to
    answer from its context needs far more examples than the population holds."""
    n_background: int = 0
    """Records per domain that every student of the domain (and its null student) trains on besides its IN
    candidates: the same set for all of them, disjoint from the candidates, the population and the teacher
    records (the next slice of the seeded shuffle), never scored. With a background set the candidates are a
    minority of a student's training set, as in OPD runs over many records for a few passes (training.epochs),
    and the probability changes caused by training on other records are shared by a target and its
    references. 0 = each student trains on its IN candidates only."""
    n_reference_records: int = 0
    """Records per domain only the offline references (plan.n_offline_references) train on, besides the background:
    the slice after the background, never a candidate, population, teacher or background record, never scored. Each
    offline reference draws n_candidates/2 of them (as many records as a student's own), so this must be at least
    that when there are offline references."""
    max_prompt_tokens: int = 384
    """Token budget for a record's prompt; longer records are an input error."""
    max_privileged_tokens: int = 384
    """Token budget for a record's privileged context."""
    drop_over_budget: StrictBool = True
    """Built-in sources: drop records over a token budget from the pool before the split (counted in the
    log). False makes any such record an input error naming it."""

    def __post_init__(self) -> None:
        self.domains = {d: s if isinstance(s, DomainSource) else DomainSource(**s) for d, s in self.domains.items()}
        if not self.domains:
            raise ConfigError("data.domains: at least one domain is needed")
        for domain in self.domains:  # a domain names its models' directories (models/<domain>-s0, ...)
            check_safe_name(domain, f"data.domains.{domain}")
        from leakaudit.membership import check_n_candidates  # here: membership's module imports stay config-free

        check_n_candidates(self.n_candidates)
        if self.n_population < 0:
            raise ConfigError(f"data.n_population: must be >= 0, got {self.n_population}")
        if self.n_teacher_records < 0:
            raise ConfigError(f"data.n_teacher_records: must be >= 0, got {self.n_teacher_records}")
        if self.n_background < 0:
            raise ConfigError(f"data.n_background: must be >= 0, got {self.n_background}")
        if self.n_reference_records < 0:
            raise ConfigError(f"data.n_reference_records: must be >= 0, got {self.n_reference_records}")
        for name in ("max_prompt_tokens", "max_privileged_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"data.{name}: must be >= 1, got {getattr(self, name)}")


def default_data() -> DataConfig:
    """The data section a study without one gets: one domain, math, from the offline champ package."""
    return DataConfig(domains={"math": DomainSource("champ")})
