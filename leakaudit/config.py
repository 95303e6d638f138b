"""Study configuration: typed dataclasses with range checks, YAML presets, dotted `--set key=value` overrides.

`load_config` resolves preset < file < `--set` into one mapping and validates ALL of it before anything runs:
every section is an instance of its owner's dataclass (training: shadow_models.OPDConfig, teacher.prep:
shadow_models.TeacherPrepConfig, signals.sampling: leakaudit.signals.SamplingConfig; the rest are defined here),
unknown keys are refused at every depth, types are checked, every `__post_init__` range check runs, attack names
and their params are resolved against the attack registry, and data sources and their option names against the
source registry (no data is loaded). Every failure is a ConfigError (InputError for an unreadable config file)
whose message names the dotted location, e.g. ``training.epochz: unknown key``.

Why pydantic: the sections stay plain stdlib dataclasses owned by their packages (with their docstrings and
`__post_init__` checks, constructed directly by library code and tests); pydantic's TypeAdapter validates such
dataclasses as they are, including their `tuple[str, ...]` and `int | None` fields, and runs `__post_init__`.
OmegaConf structured configs do not support tuple fields. Each dataclass sets
``__pydantic_config__ = ConfigDict(extra="forbid")`` so unknown keys are rejected wherever they appear.

A resolved config (every default spelled out, tuples as lists, None as null) is written to ``study.yaml`` in the
run directory; ``load_config(run_dir / "study.yaml")`` gives back the identical config and `StudyConfig.hash()`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import ConfigDict, StrictBool, StrictInt, TypeAdapter, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

from leakaudit.errors import ConfigError, InputError
from leakaudit.memory import ALLOCATOR_POLICIES
from leakaudit.presets import preset_names
from leakaudit.rundir import check_run_name, check_safe_name
from leakaudit.signals.types import SamplingConfig
from leakaudit.yamlio import load_yaml, read_yaml
from shadow_models.config import OPDConfig, TeacherPrepConfig

PRESETS = preset_names()  # the YAML files in leakaudit/presets, default first
PREPARED_TEACHERS = {"prepared": "privileged", "restated": "restated"}
"""teacher.kind values for a teacher the run prepares itself -> its SFT target (shadow_models.teacher_prep)."""

_FORBID = ConfigDict(extra="forbid")
# Fields typed StrictBool / StrictInt refuse the other (pydantic's lax mode reads `seed: true` as 1 and
# `trust_remote_code: 1` as True); YAML (files and --set values alike) gives real ints and bools, so they load.


def _located(value: Any, handler: Any) -> Any:
    """Pydantic wrap validator: a section's own ConfigError (from its __post_init__) becomes a validation error at
    the section's location, so the message can name it (pydantic only collects ValueError/AssertionError)."""
    try:
        return handler(value)
    except (ConfigError, TypeError) as e:
        raise PydanticCustomError("config", "{message}", {"message": str(e)}) from None


_T = TypeVar("_T")
Checked = Annotated[_T, WrapValidator(_located)]
"""`Checked[Section]`: a section dataclass whose range-check errors are reported at its dotted location."""


@dataclass
class DomainSource:
    """Where one domain's records come from."""

    __pydantic_config__ = _FORBID

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
    __pydantic_config__ = _FORBID

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


@dataclass
class PlanConfig:
    __pydantic_config__ = _FORBID

    n_students: int = 4
    """Students per domain (even). Each is a target in turn; its matched references are the others."""
    null_student: StrictBool = True
    """Also train a student on population records only: the built-in null check (AUROC must be ≈ 0.5)."""
    n_null_students: int = 1
    """With null_student: null students per domain (1 to n_students), each trained on its own n_candidates/2
    population records and attacked with another student's labels, so the null check pools that many draws (one
    null target of 12 + 12 candidates: AUROC sd 0.12 under no signal, and its CI excludes 0.5 in 5.5% of
    no-signal draws; experiments/null_check_calibration.py). Each costs one student's training."""
    n_matched_references: int = 0
    """References per record for Leaky (OUT) and LiRA-online (IN); 0 = the most every record allows,
    n_students/2 - 1, fixed so the count never depends on membership."""
    keep_design: str = "lira"
    """'lira' (random balanced halves) or 'balanced_subsets' (every IN-set of size n_students/2 equally often,
    so that which student is a record's matched reference does not depend on its label; see
    leakaudit.membership.balanced_subsets_keep_matrix). With 4 students 'lira' confounds reference identity
    with membership (experiments/reference_confound.py)."""

    n_offline_references: int = 0
    """The offline design beside the keep matrix: this many reference students per domain trained on the background
    plus reference-only records (data.n_reference_records), never on a candidate, so each serves every candidate of
    every target. Every target is then attacked twice: with its matched references, and with the offline ones
    (attack labels ending '@offline'; online attacks replaced by their offline forms). 0 = none."""

    def __post_init__(self) -> None:
        if self.n_offline_references < 0:
            raise ConfigError(f"plan.n_offline_references: must be >= 0, got {self.n_offline_references}")
        from leakaudit.membership import check_n_students  # here: membership's module imports stay config-free

        check_n_students(self.n_students)
        if not 0 <= self.n_matched_references <= self.n_students // 2 - 1 and self.n_matched_references:
            raise ConfigError(f"plan.n_matched_references: must be in [1, n_students/2 - 1 = "
                              f"{self.n_students // 2 - 1}] or 0, got {self.n_matched_references}")
        if self.null_student and not 1 <= self.n_null_students <= self.n_students:
            raise ConfigError(f"plan.n_null_students: must be in [1, n_students = {self.n_students}] (each takes "
                              f"its labels from another student), got {self.n_null_students}")
        if self.keep_design not in ("lira", "balanced_subsets"):
            raise ConfigError(f"plan.keep_design: must be 'lira' or 'balanced_subsets', got {self.keep_design!r}")


@dataclass
class TeacherConfig:
    __pydantic_config__ = _FORBID

    kind: str = "self"
    """'self' = the frozen base student; 'prepared' = the base after SFT on population and teacher-only records
    (never candidates) to copy the privileged text from its context (the copying teacher); 'restated' = the same
    SFT with the record's restatement as the target (leakaudit.data.restate: an equivalent code body with locals
    renamed, the worked solution answer-first and reworded, the deciding findings in another template than the
    note), a teacher that answers *from* its context in another surface form than the privileged text; records
    no rule restates are left out of its SFT set (counted in its meta.json). Both are cached per run under
    models/_teacher. Or a model reference (hub id / directory). Every run records how literal its teacher is
    (teacher_literalness.json, sample_literalness.json; leakaudit.literalness)."""
    prep: Checked[TeacherPrepConfig] = field(default_factory=TeacherPrepConfig)
    """shadow_models.TeacherPrepConfig, used when kind is 'prepared' or 'restated'. Its seed: null = derived by
    the study from the master `seed`; an int is used as is."""

    def __post_init__(self) -> None:
        if not self.kind.strip():
            raise ConfigError("teacher.kind: must be 'self', 'prepared', 'restated' or a model reference, got ''")

    @property
    def prepared(self) -> bool:
        """True when the run prepares its own teacher (kind 'prepared' or 'restated')."""
        return self.kind in PREPARED_TEACHERS

    @property
    def sft_target(self) -> str | None:
        """What a prepared teacher is fine-tuned to write (shadow_models.teacher_prep.SFT_TARGETS), else None."""
        return PREPARED_TEACHERS.get(self.kind)


@dataclass
class SignalsConfig:
    __pydantic_config__ = _FORBID

    backend: str = "transformers"
    """'transformers' (CPU/GPU) or 'vllm' (GPU; optional extra, untested on CPU-only machines)."""
    sampling: Checked[SamplingConfig] = field(default_factory=SamplingConfig)
    """leakaudit.signals.SamplingConfig for fresh trajectories (n_per_record, temperature, ...). Its seed:
    null = derived by the study per target from the master `seed`; an int is used as is."""
    score_batch_size: int = 16
    """Sequences per forward pass when scoring."""
    autocast_bf16: StrictBool = False
    """bf16 autocast for scoring. Off by default: its per-token error (mean 0.016, max 0.18 nats on
    smollm2-135m, bench/bench_signals.py) is the size of the gaps attacks look for. Sampling runs on a bf16
    copy of the weights where bf16 is native either way (every model then scores the samples in fp32)."""
    vllm_stats_topk: int = -1
    """vLLM only: log-probs returned per position for Min-K%++'s vocabulary statistics; -1 = the whole
    vocabulary (exact, heavy), k > 0 = an estimate from the top k."""
    share_prefix: StrictBool = True
    """transformers backend: score the n trajectories of a record from one KV cache of their shared prompt
    instead of re-running the prompt per trajectory (HFOptions.share_prefix). Changes only speed: the scores
    equal the per-sequence path's up to float noise (fp32 max abs diff 2.5e-5 / 2.9e-5 nats on smollm2-135m,
    the size of batched vs one-by-one plain scoring; tests/test_prefix_scoring.py holds it to 1e-5 on a tiny
    model), and scoring the default preset's trajectories runs 1.78x / 1.82x faster (bench/results/
    signals_prefix.json, signals_stage.json). Only score_fresh repeats prompts; score_fixed is unchanged. vLLM:
    ignored (its prompt-logprob requests bypass its prefix cache; scores are the same either way)."""
    share_prefill: StrictBool = False
    """transformers backend: sample the n trajectories of a prompt from one prefill of it, in a decode loop of
    leakaudit's own instead of model.generate (HFOptions.share_prefill). Off: it did not pay (0.91-1.14x on
    smollm2-135m, median 1.02x, bench/results/signals_prefix.json; decoding, not the prefill, dominates), and
    under bf16 sampling it draws other tokens than the generate path (4/32 trajectories identical; in fp32 the
    same tokens). vLLM: ignored (a request with n > 1 already prefills its prompt once, via vLLM's prefix
    cache)."""

    def __post_init__(self) -> None:
        if self.backend not in ("transformers", "vllm"):
            raise ConfigError(f"signals.backend: must be 'transformers' or 'vllm', got {self.backend!r}")
        if self.score_batch_size < 1:
            raise ConfigError(f"signals.score_batch_size: must be >= 1, got {self.score_batch_size}")
        if self.vllm_stats_topk != -1 and self.vllm_stats_topk < 1:
            raise ConfigError(f"signals.vllm_stats_topk: must be -1 (whole vocabulary) or >= 1, "
                              f"got {self.vllm_stats_topk}")


@dataclass
class AttackSpecConfig:
    """One attack to run. Checked at construction: the name is registered and the params are valid for it
    (unknown keys and the params dataclass's range checks raise ConfigError); `params` then holds every
    parameter, defaults spelled out."""

    __pydantic_config__ = _FORBID

    name: str
    """A registered attack (`leakaudit attacks`)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The attack's parameters (`leakaudit attacks` lists them with their defaults); unset ones take the default."""
    label: str = ""
    """Display name; defaults to the attack name (set it when one attack runs with several params)."""

    def __post_init__(self) -> None:
        from attacks import get_attack, params_dict
        from attacks.errors import AttackConfigError

        try:
            spec = get_attack(self.name)
        except AttackConfigError as e:
            raise ConfigError(f"name: {e}") from None
        known = [f.name for f in dataclasses.fields(spec.params_cls)]
        for key in self.params:
            if key not in known:
                raise ConfigError(f"params.{key}: unknown parameter of attack {self.name!r}; "
                                  f"known: {', '.join(known) or 'none'}")
        try:
            made = spec.make_params(dict(self.params))
        except AttackConfigError as e:
            # the params dataclasses name their field as '<attack>.<field>': point at params.<field> instead
            msg = str(e)
            m = re.match(r"[\w-]+\.(\w+)\b", msg)
            raise ConfigError(f"params.{msg[m.start(1):]}" if m and m.group(1) in known
                              else f"params: {msg}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"params: {e}") from None
        self.params = params_dict(made)

    @property
    def display(self) -> str:
        return self.label or self.name


@dataclass
class MetricsConfig:
    __pydantic_config__ = _FORBID

    n_boot: int = 1000
    """Bootstrap resamples for AUROC confidence intervals."""
    seed: StrictInt = 0
    """Bootstrap seed (>= 0). Fixed rather than derived from the master `seed`, so a new study seed changes the
    experiment but not how it is measured."""

    def __post_init__(self) -> None:
        if self.n_boot < 0:
            raise ConfigError(f"metrics.n_boot: must be >= 0, got {self.n_boot}")
        if self.seed < 0:
            raise ConfigError(f"metrics.seed: must be >= 0, got {self.seed}")


@dataclass
class AuditConfig:
    """Present for `leakaudit audit`: the target is given, the references are trained on (or given as) models that
    never saw a candidate."""

    __pydantic_config__ = _FORBID

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
    leakaudit.audit.default_null_size: enough for p = 0.01 (99 records) where the population allows, else half of
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
                raise ConfigError("--target-model: required when --target is an API URL (the served model's name, "
                                  "as GET /v1/models lists it)")
        elif self.target_model is not None:
            raise ConfigError("--target-model: only for an API target (--target http://HOST:PORT/v1)")
        if self.api_concurrency < 1 or self.api_max_retries < 0 or not self.api_timeout_s > 0:
            raise ConfigError("audit.api_concurrency must be >= 1, api_max_retries >= 0 and api_timeout_s > 0; got "
                              f"{self.api_concurrency}, {self.api_max_retries}, {self.api_timeout_s}")
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


EXECUTION_BACKENDS = ("local", "ray")


@dataclass
class ExecutionConfig:
    """Where the students and signals stages run their jobs (leakaudit.executors): one job per student, one per
    target for sampling, one per model for scoring. It is left out of `StudyConfig.hash` (a run directory resumes
    under either backend), so know what it can change: a job's torch thread count (local_workers, cpus_per_student)
    sets the reduction order, hence float rounding (~1e-5 nats in the tiny study's scores), and through training
    and sampling such a difference can grow into other sampled tokens. The same execution section on the same
    machine reproduces a run byte for byte; the tests compare executors at equal thread counts."""

    __pydantic_config__ = _FORBID

    backend: str = "local"
    """'local' = jobs on this machine, no Ray needed (`local_workers` says how many at once); 'ray' = each job a
    Ray task (the optional extra `leakaudit[ray]`). With ray the run directory must be on a filesystem every Ray
    worker sees."""
    local_workers: int = 1
    """local: jobs run at once. 1 = one after another in this process, at every core's threads. n > 1 = each job in
    a fresh process of its own (spawned, so its memory goes back to the OS when it ends), n at a time, each at
    usable cores // n torch threads: on 2 cores two 1-thread jobs do more work per hour than one 2-thread job
    (students 1.12x on an AMD EPYC, 1.28x on an Intel Xeon with AMX; signals 1.2x;
    bench/results/students_parallel*.json, signals_parallel.json), at twice the memory (a student peaks at ~7-8 GB).
    A job whose process dies is reported by its id, the others go on."""
    address: str | None = None
    """ray: the cluster to join (ray.init(address=...)): 'auto' = the cluster `ray start` set up on this node,
    'ray://host:10001' = a remote head; null = start a Ray instance on this machine for the run."""
    gpus_per_student: float = 1.0
    """ray: GPUs each job asks Ray for (a student, a target's sampling, a model's scoring); 0 on CPU-only clusters.
    A job that asks for more GPUs than the cluster has is refused before anything is submitted (no hang)."""
    cpus_per_student: float = 1.0
    """ray: CPUs each job asks Ray for (> 0). Ray sets OMP_NUM_THREADS in the worker from it."""
    max_retries: int = 0
    """ray: times Ray reruns a job whose worker process died (Ray's task max_retries). 0: a dead worker is
    reported with the job's id and the study's rerun redoes the job (the DONE markers say what is missing)."""
    jobs_per_worker: int = 1
    """ray: jobs one Ray worker process runs before it exits (Ray's task `max_calls`). 1 = a fresh process per job,
    so a job's memory goes back to the OS when it ends: a student peaks at ~7 GB at micro-batch 4 and a reused
    worker kept 8.5 GB after it, which with a second student and the driver took a 24 GiB machine into Ray's OOM
    killer. 0 = reuse workers without limit (saves a process start, a few seconds, per job)."""
    allocator: str = "reuse"
    """How the driver and every job's process treat freed heap memory (leakaudit.memory.set_allocator_policy; both
    backends). 'reuse' = freed blocks stay in the process for the next step (glibc mmap threshold 2 GB, no automatic
    trim), given back at each stage's end: on a 2-core Intel Xeon with AMX an OPD step after the first then faults
    ~0.1 M pages instead of ~1.0 M and takes 26 s instead of 44 (from the third step on 20 s), at the same peak
    (bench/results/allocator.json). 'system' = glibc's defaults (each block over 32 MB mapped and unmapped per use).
    Results do not depend on it."""

    def __post_init__(self) -> None:
        if self.backend not in EXECUTION_BACKENDS:
            raise ConfigError(f"execution.backend: must be one of {', '.join(EXECUTION_BACKENDS)}, "
                              f"got {self.backend!r}")
        if self.address is not None and not str(self.address).strip():
            raise ConfigError("execution.address: must be a Ray address ('auto', 'ray://host:port') or null")
        if self.gpus_per_student < 0:
            raise ConfigError(f"execution.gpus_per_student: must be >= 0, got {self.gpus_per_student}")
        if self.cpus_per_student <= 0:
            raise ConfigError(f"execution.cpus_per_student: must be > 0, got {self.cpus_per_student}")
        if self.local_workers < 1:
            raise ConfigError(f"execution.local_workers: must be >= 1, got {self.local_workers}")
        if self.max_retries < 0:
            raise ConfigError(f"execution.max_retries: must be >= 0, got {self.max_retries}")
        if self.allocator not in ALLOCATOR_POLICIES:
            raise ConfigError(f"execution.allocator: must be one of {', '.join(ALLOCATOR_POLICIES)}, "
                              f"got {self.allocator!r}")
        if self.jobs_per_worker < 0:
            raise ConfigError(f"execution.jobs_per_worker: must be >= 0 (0 = no limit), got {self.jobs_per_worker}")


def _default_data() -> DataConfig:
    return DataConfig(domains={"math": DomainSource("champ")})


@dataclass
class StudyConfig:
    # numbers given for a str field (`--set name=2024`) are read as that string
    __pydantic_config__ = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    name: str = "default"
    """Run directory name under out_root."""
    out_root: str = "runs"
    """Directory the run directory `name` is made in."""
    seed: StrictInt = 0
    """Master seed: membership plan, training order, sampling (each stage derives its own from this)."""
    base_model: str = "smollm2-135m"
    """Student initialisation: 'smollm2-135m' (offline), a hub id, or a local checkpoint directory."""
    trust_remote_code: StrictBool = False
    """Let transformers run code shipped with a hub model. Off: only architectures transformers itself knows."""
    data: Checked[DataConfig] = field(default_factory=_default_data)
    plan: Checked[PlanConfig] = field(default_factory=PlanConfig)
    teacher: Checked[TeacherConfig] = field(default_factory=TeacherConfig)
    training: Checked[OPDConfig] = field(default_factory=OPDConfig)
    """shadow_models.OPDConfig (loss, epochs, learning_rate, ...). Its seed stays null here: the study derives
    one per student from the master `seed`."""
    signals: Checked[SignalsConfig] = field(default_factory=SignalsConfig)
    attacks: list[Checked[AttackSpecConfig]] = field(default_factory=list)
    """Attacks to run; empty = every registered attack with its default parameters."""
    metrics: Checked[MetricsConfig] = field(default_factory=MetricsConfig)
    audit: Checked[AuditConfig] | None = None
    """Set for an audit (`leakaudit audit`): the given target and how its references are made."""
    execution: Checked[ExecutionConfig] = field(default_factory=ExecutionConfig)
    """Where the students and signals jobs run (local or Ray); not part of `hash()`."""

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError("name: must be a non-empty run directory name")
        check_run_name(self.name)
        if self.seed < 0:
            raise ConfigError(f"seed: must be >= 0, got {self.seed}")
        if self.training.seed is not None:
            raise ConfigError("training.seed is derived per student from the study's `seed`; set `seed` instead")
        seen: dict[str, int] = {}
        for i, a in enumerate(self.attacks):
            if a.display in seen:
                raise ConfigError(f"attacks[{i}]: label {a.display!r} is already used by attacks[{seen[a.display]}]; "
                                  f"give one of them a distinct `label`")
            seen[a.display] = i
        n_null = self.plan.n_null_students if self.plan.null_student else 0
        if self.audit is None and n_null > 1 and self.data.n_population < n_null * (self.data.n_candidates // 2):
            raise ConfigError(f"data.n_population: {n_null} null students (plan.n_null_students) each train on "
                              f"n_candidates/2 = {self.data.n_candidates // 2} population records of their own, "
                              f"{n_null * (self.data.n_candidates // 2)} in all; got {self.data.n_population}")
        if self.plan.n_offline_references and self.data.n_reference_records < self.data.n_candidates // 2:
            raise ConfigError(f"data.n_reference_records: {self.plan.n_offline_references} offline references "
                              f"(plan.n_offline_references) each train on n_candidates/2 = {self.data.n_candidates // 2} "
                              f"reference-only records; got {self.data.n_reference_records}")

    @property
    def run_dir(self) -> Path:
        return Path(self.out_root) / self.name

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML types, every default spelled out (tuples as lists, None as None)."""
        return _STUDY.dump_python(self, mode="json")

    def hash(self) -> str:
        """sha256 (first 12 hex) of the resolved config (keys sorted), ignoring where the run is written
        (`out_root`) and how its jobs are executed (`execution`: results do not depend on it), and every
        key of NEUTRAL_DEFAULTS at its neutral value (an option added later, at the value that computes what the
        code did before it existed: runs made before it keep their hash and resume), and the PACING_KEYS at any."""
        return hashlib.sha256(json.dumps(self.hashed_dict(), sort_keys=True).encode()).hexdigest()[:12]

    def hashed_dict(self) -> dict[str, Any]:
        """The resolved config as `hash()` sees it (out_root, execution and neutral defaults left out)."""
        d = self.to_dict()
        d.pop("out_root")
        d.pop("execution")
        for dotted, neutral in NEUTRAL_DEFAULTS.items():
            *parents, key = dotted.split(".")
            section = d
            for p in parents:
                section = section.get(p) if isinstance(section, dict) else None
            if isinstance(section, dict) and key in section and (section[key] == neutral or dotted in PACING_KEYS):
                del section[key]
        return d


NEUTRAL_DEFAULTS: dict[str, Any] = {
    "data.n_background": 0,
    "data.n_reference_records": 0,
    "plan.n_offline_references": 0,
    "plan.n_null_students": 1,
    # the decode loop samples the same tokens as generate (tests/test_decode.py), so runs before the field resume
    "training.rollout_decoder": "loop",
    "training.rollout_seeding": "step",
    "audit.target_model": None,
    "audit.api_key_env": None,
    "audit.api_concurrency": 4,
    "audit.api_timeout_s": 60.0,
    "audit.api_max_retries": 4,
    # the verdict's keys at their defaults: an audit made before them keeps its hash, and its saved plan (no null
    # sample) is then refused by the plan check with its --force plan advice (Study._check_saved_plan)
    "audit.null_sample": None,
    "audit.null_size": 0,
    "audit.fdr": 0.1,
    "audit.fpr": None,
    "audit.prompt_column": None,
    "audit.privileged_column": None,
    "audit.id_column": None,
    "audit.domain": None,
}
"""Dotted config keys added after runs existed -> the value at which they change nothing; `StudyConfig.hash` leaves
them out at that value. (Adding a key with its neutral value here is the one way to add an option without
invalidating every finished run directory.)"""
PACING_KEYS = ("audit.api_key_env", "audit.api_concurrency", "audit.api_timeout_s", "audit.api_max_retries")
"""Keys of NEUTRAL_DEFAULTS left out of the hash at every value: how an API target is reached and paced changes no
result (the journal keys requests by their bodies), so a rerun with more concurrency or another key variable
resumes the same audit."""

_STUDY = TypeAdapter(Checked[StudyConfig])


def with_seed(section: Any, derived: int) -> Any:
    """`section` (OPDConfig, TeacherPrepConfig, SamplingConfig) with its seed set to `derived` if it is None;
    a seed the config sets is kept. How the study resolves the seeds a config leaves null."""
    return section if section.seed is not None else dataclasses.replace(section, seed=derived)


# ---- validation errors -> one ConfigError naming each dotted location ----------------------------------------
def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _strip(tp: Any) -> Any:
    """Annotated[X, ...] -> X; X | None -> X."""
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _section_at(loc: tuple[Any, ...]) -> Any:
    """The type at `loc` inside StudyConfig (None when the path leaves the schema)."""
    tp: Any = StudyConfig
    for part in loc:
        tp = _strip(tp)
        origin = typing.get_origin(tp)
        if dataclasses.is_dataclass(tp) and isinstance(part, str):
            hints = typing.get_type_hints(tp)
            if part not in hints:
                return None
            tp = hints[part]
        elif origin in (list, tuple) and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return _strip(tp)


def _field_names(loc: tuple[Any, ...]) -> list[str]:
    tp = _section_at(loc)
    return [f.name for f in dataclasses.fields(tp)] if dataclasses.is_dataclass(tp) else []


def _describe(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    where = _dotted(loc)
    kind = err["type"]
    if kind == "config":
        msg = err["ctx"]["message"]
        if not where or (msg.startswith(where) and msg[len(where):len(where) + 1] in (".", ":", " ", "=", "[")):
            return msg  # the section's own message already names its full location
        head = re.match(r"[A-Za-z_]\w*", msg)
        if head and head.group() in _field_names(loc):
            return f"{where}.{msg}"  # e.g. training + "epochs=0: must be ..." -> training.epochs=0: must be ...
        return f"{where}: {msg}"
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        known = _field_names(loc[:-1])
        return f"{where}: unknown key" + (f"; expected one of {', '.join(known)}" if known else "")
    if kind == "missing":
        return f"{where}: required"
    value = err.get("input")
    got = repr(value)
    got = f" (got {got})" if len(got) <= 60 and not isinstance(value, dict) else ""
    return f"{where or 'study config'}: {err['msg']}{got}"


def validate_config(values: dict[str, Any]) -> StudyConfig:
    """A fully checked StudyConfig from a plain mapping (ConfigError naming every bad dotted location)."""
    try:
        return _STUDY.validate_python(values)
    except ValidationError as e:
        problems = [_describe(err) for err in e.errors()]
        raise ConfigError(problems[0] if len(problems) == 1
                          else f"{len(problems)} problems in the study config: " + "; ".join(problems)) from None
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"study config: {e}") from None


# ---- presets, files, --set ------------------------------------------------------------------------------------
def preset_dict(name: str) -> dict[str, Any]:
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {list(PRESETS)}")
    text = resources.files("leakaudit.presets").joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    return load_yaml(text) or {}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key, anything else replaces. Kept by hand: pydantic validates a config but has no
    merge of layered mappings (preset < file < --set)."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_set(d: dict[str, Any], assignment: str) -> dict[str, Any]:
    """Apply one ``dotted.key=value`` override (value parsed as plain YAML: numbers, bools, lists, null)."""
    if "=" not in assignment:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    key, raw = assignment.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    if not all(p.strip() for p in parts):
        raise ConfigError(f"--set {assignment!r}: {key!r} is not a dotted key")
    try:
        value = load_yaml(raw) if raw.strip() else ""  # yaml.safe_load, a duplicate key refused
    except yaml.YAMLError as e:  # includes ConstructorError for tags such as !!python/object
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"--set {assignment!r}: the value is not plain YAML ({problem})") from None
    out = copy.deepcopy(d)
    node = out
    for i, p in enumerate(parts[:-1]):
        if node.get(p) is None:
            node[p] = {}
        node = node[p]
        if not isinstance(node, dict):
            raise ConfigError(f"--set {assignment!r}: {'.'.join(parts[:i + 1])} is not a mapping "
                              f"(it holds {node!r})")
    node[parts[-1]] = value
    return out


def load_config(path: str | Path | None = None, *, preset: str | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> StudyConfig:
    """Resolve a study config: preset (default 'default', or the file's `preset:` key) < file < --set, then
    validate all of it (ConfigError naming the dotted location; InputError for a file that cannot be read)."""
    file_dict: dict[str, Any] = {}
    p = Path(path) if path is not None else None
    if p is not None:
        if not p.is_file():
            raise InputError("config file not found", path=str(p))
        file_dict = read_yaml(p)  # InputError naming the file and line: unreadable, not YAML, a key given twice
        if file_dict is None:
            raise ConfigError(f"{p}: empty config (no keys, only comments or nothing); a study config file must set "
                              "something, e.g. `preset: default`")
        if not isinstance(file_dict, dict):
            raise InputError("a study config must be a mapping", path=str(p))
    file_dict.pop("_meta", None)  # provenance block that run-study appends to study.yaml
    from_file = not preset and bool(file_dict.get("preset"))
    preset = preset or file_dict.pop("preset", None) or "default"
    try:
        merged = deep_merge(preset_dict(preset), file_dict)
    except ConfigError as e:
        if not from_file:
            raise
        raise ConfigError(f"{p}: preset: {e}") from None
    file_domains = (file_dict.get("data") or {}).get("domains") if isinstance(file_dict.get("data"), dict) else None
    if file_domains is not None:
        # the domains a file lists are the study's domains: never add the preset's other domains to them
        merged["data"]["domains"] = copy.deepcopy(file_domains)
    from_file_only = copy.deepcopy(merged)
    for assignment in overrides:
        merged = apply_set(merged, assignment)
    merged.setdefault("name", preset)
    try:
        return validate_config(merged)
    except ConfigError as e:
        if p is None:
            raise
        if overrides:  # name the file only when the file itself (without the --set overrides) is bad
            from_file_only.setdefault("name", preset)
            try:
                validate_config(from_file_only)
            except ConfigError:
                pass
            else:
                raise
        raise ConfigError(f"{p}: {e}") from None


def restrict_domains(cfg: StudyConfig, domains: list[str] | tuple[str, ...]) -> StudyConfig:
    """The same study on a subset of its domains (a *shard*, run-study --domain): data.domains keeps only `domains`
    (in the config's order) and the run is named `<name>-<domain>[-<domain>...]`. Records, plan, students and
    sampling of a domain are seeded by the master seed and the domain's name alone (leakaudit.membership), so a
    shard's domain gets the records, members and student seeds the whole study would give it; what differs is the
    teacher, which a shard prepares on its own domains' records only. `leakaudit pool` joins shards again."""
    unknown = [d for d in domains if d not in cfg.data.domains]
    if unknown:
        raise ConfigError(f"--domain {', '.join(unknown)}: not a domain of this study (data.domains has "
                          f"{', '.join(cfg.data.domains)})")
    if not domains:
        return cfg
    d = cfg.to_dict()
    keep = [k for k in cfg.data.domains if k in set(domains)]
    d["data"]["domains"] = {k: d["data"]["domains"][k] for k in keep}
    d["name"] = "-".join([cfg.name, *keep])
    return validate_config(d)


def dump_config(cfg: StudyConfig) -> str:
    """study.yaml: every key, defaults spelled out; `load_config` of it gives back the same `cfg.hash()`."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True)
