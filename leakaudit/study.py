"""run-study and audit: records → plan → (teacher) → students → signals → attacks → report, resumable.

One pipeline serves both. A study draws candidates from configured sources and trains a keep matrix of
students, each a target in turn; an audit (`cfg.audit`) is a study whose target is given and whose references
never saw a candidate (the plan's `disjoint` design), so both go through the same stages, the same assembler and
the same resume checks.

Order of work: `prepare()` loads and checks the whole config and every input in memory (records, token budgets,
domains, the plan, model references, the state of an existing run directory) and writes nothing; only then is
the run directory touched. Each stage leaves a marker (leakaudit.stage_marks) with the hash of its inputs and
of its outputs; a stage whose marker matches is skipped, so a crash loses only the stage in flight, and a
marker that does not match (an edited records.jsonl, a target model retrained in place) is an error before
anything is written or deleted. ``force`` names stages to redo; forcing a stage also redoes every later stage.
A run directory holding a different config is refused rather than silently mixed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from leakaudit import stage_marks
from leakaudit.config import StudyConfig, dump_config, with_seed
from leakaudit.data.admit import admit, check_budget
from leakaudit.data.records import Record, check_unique, make_record_id, normalise_id, read_jsonl, write_jsonl
from leakaudit.data.user_files import record_lines
from leakaudit.errors import ConfigError, InputError, LeakauditError
from leakaudit.executors import Job, JobsFailed, check_backend, make_executor
from leakaudit.io import atomic_path, is_done, mark_done, read_json, write_json, write_text
from leakaudit.locks import launch_ranks, made_once, run_exclusively
from leakaudit.memory import release_freed_memory, set_allocator_policy
from leakaudit.membership import (TARGET_ID, MembershipPlan, _stable_seed, disjoint_plan, keep_matrix_plan,
                                  background_slice, reference_slice, split_pool, teacher_slice)
from leakaudit.rundir import RunDir, check_run_root

STAGES = ("records", "plan", "teacher", "students", "signals", "attacks", "report")
REBUILT_WHEN_CHANGED = ("report",)
"""Stages whose outputs are presentation only, derived from earlier outputs: when they no longer match their
marker (`leakaudit report --redact` rebuilt them) they are rebuilt instead of refused."""
TRAINED_ROLES = ("student", "null", "reference", "offline")
AUDIT_HELD_OUT_FRACTION = 4
"""An audit that trains its references holds out 1/4 of the population from all of them: RMIA compares each
candidate against population records that no reference (and not the target) trained on."""


def stage_seed(master: int, *parts: object) -> int:
    """A per-stage, per-model seed derived from the master seed (recorded wherever it is used)."""
    return _stable_seed(master, *parts) % (2**31 - 1)


def _jsonl_bytes(records: list[Record]) -> bytes:
    return "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def model_ref_key(name: str) -> str:
    """The config key (and flag) of an external_models() entry, for errors: 'base' -> 'base_model', ..."""
    if name.startswith("reference"):
        return f"audit.references[{name[len('reference'):]}] (--references)"
    return {"base": "base_model (--base-model)", "teacher": "teacher.kind (--teacher)",
            "target": "audit.target (--target)"}.get(name, name)


def same_record_keys(record: Record) -> tuple[str, str]:
    """What makes two audit records one to a reference that trains on them: the same id, or the same text given
    under another id (its content hash, make_record_id; before, only ids were compared). ('id:…', 'text:…')."""
    return (f"id:{normalise_id(record.record_id)}",
            f"text:{make_record_id(record.domain, record.prompt, record.privileged)}")


def check_audit_label(record: Record, *, path: str, line: int | None) -> None:
    """A candidate's meta.is_member, when given, is a JSON boolean (or 0 / 1): the string "false" is truthy, and
    bool("false") made every such candidate a member."""
    value = record.meta.get("is_member")
    if value is None or isinstance(value, bool) or (type(value) is int and value in (0, 1)):
        return
    raise InputError(f"meta.is_member must be true or false (a JSON boolean), got {value!r}", path=path, line=line,
                     record_id=record.record_id, field="meta.is_member")


def unique_by_id(records: list[Record]) -> dict[str, Record]:
    """{record_id: record} over every domain's records; InputError when two records share an id (ids are checked
    unique within a domain's pool; across domains a later one silently replaced an earlier one, so a candidate's id
    could name another domain's background record)."""
    out: dict[str, Record] = {}
    for r in records:
        first = out.setdefault(normalise_id(r.record_id), r)
        if first is not r:
            raise InputError(f"two records share this id (domains {first.domain!r} and {r.domain!r}); record ids "
                             "must be unique across a study's domains", record_id=r.record_id, field="record_id")
    return {r.record_id: r for r in out.values()}


class Study:
    """One run directory and its stages. `log` receives one-line progress messages; `progress` draws the stage and
    training bars (None: only when stderr is a terminal, so a log file gets the one-line messages and no escape
    codes); `redact` replaces privileged texts in the report."""

    def __init__(self, cfg: StudyConfig, *, force: Iterable[str] = (), log: Callable[[str], None] = print,
                 progress: bool | None = None, redact: bool = False, recipe_sources: dict[str, str] | None = None):
        from leakaudit.precision import resolve_study_precision

        # bf16_autocast 'auto' -> true/false on the devices that train, before anything is hashed (leakaudit.precision)
        self.cfg, self.precision = resolve_study_precision(cfg)
        self.recipe_sources = recipe_sources
        """An audit's: where each part of its references' recipe came from (leakaudit.audit.recipe_sources),
        written to audit.json; None = the study config."""
        self.run = RunDir(cfg.run_dir)
        self.log = log
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.redact = redact
        force = set(force)
        unknown = force - set(STAGES) - {"all"}
        if unknown:
            raise ConfigError(f"--force: unknown stages {sorted(unknown)}; stages are {list(STAGES)} or 'all'")
        if "all" in force:
            force = set(STAGES)
        self.force_from = min((STAGES.index(s) for s in force), default=len(STAGES))
        self._tokenizer = None
        self._records: dict[str, Record] | None = None
        self._teacher_records: list[Record] | None = None
        self._audit_background: list[Record] = []
        self._audit_null: list[Record] = []
        self._plan: MembershipPlan | None = None
        self._todo_from: int | None = None
        self._digests: dict[str, str] = {}
        self._executor = None

    @property
    def is_audit(self) -> bool:
        return self.cfg.audit is not None

    @property
    def api_target(self) -> bool:
        """An audit whose target is an OpenAI-compatible endpoint (leakaudit.signals.api_stage), not a model."""
        from leakaudit.signals.api_client import is_api_target

        return self.is_audit and is_api_target(self.cfg.audit.target)

    # ---- helpers ----------------------------------------------------------------------------------------
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from leakaudit.models import load_tokenizer

            self._tokenizer = load_tokenizer(self.cfg.base_model, trust_remote_code=self.cfg.trust_remote_code)
        return self._tokenizer

    def records(self) -> dict[str, Record]:
        """The run's records by id: prepared in memory by `prepare()`, else read from records.jsonl."""
        if self._records is None:
            self._records = {r.record_id: r for r in read_jsonl(self.run.records)}
        return self._records

    def teacher_records(self) -> list[Record]:
        if self._teacher_records is None:
            self._teacher_records = read_jsonl(self.run.teacher_records) if self.run.teacher_records.is_file() else []
        return self._teacher_records

    def plan(self) -> MembershipPlan:
        """The run's membership plan: built in memory by `prepare()`, else read from the run directory."""
        if self._plan is None:
            self._plan = MembershipPlan.load(self.run.plan_dir)
        return self._plan

    @property
    def executor(self):
        """The run's executor (leakaudit.executors; cfg.execution), made at first use and kept for the run."""
        if self._executor is None:
            self._executor = make_executor(self.cfg.execution, self.run.root, log=self.log)
        return self._executor

    def close(self) -> None:
        """Release the executor (a Ray instance the run started is shut down)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def trained_models(self) -> list[str]:
        """Plan models this run trains (students, null students, references it is not given)."""
        return [m for m, info in self.plan().models.items() if info["role"] in TRAINED_ROLES and "path" not in info]

    def teacher_model(self) -> str | None:
        kind = self.cfg.teacher.kind
        if kind == "self":
            return None
        if self.cfg.teacher.prepared:
            return str(self.run.teacher)
        return kind

    def model_ref(self, model_id: str) -> str:
        from leakaudit.assemble import BASE_ID

        if model_id == BASE_ID:
            return self.cfg.base_model
        if model_id == TARGET_ID and self.is_audit:
            return self.cfg.audit.target
        info = self.plan().models.get(model_id, {})
        return info.get("path") or str(self.run.model(model_id))

    def external_models(self) -> dict[str, str]:
        """Model references the run reads but does not make: base, a teacher given by reference, an audit's
        target and given references (their content digests are stage inputs)."""
        refs = {"base": self.cfg.base_model}
        if self.cfg.teacher.kind != "self" and not self.cfg.teacher.prepared:
            refs["teacher"] = self.cfg.teacher.kind
        if self.is_audit:
            if not self.api_target:  # an endpoint has no content digest: its URL and model name are in the config
                refs["target"] = self.cfg.audit.target
            refs.update({f"reference{k}": r for k, r in enumerate(self.cfg.audit.references)})
        return refs

    def stage_outputs(self, stage: str) -> list[Path]:
        """Files and directories a stage writes (what its marker hashes and --force removes)."""
        run = self.run
        if stage == "students":
            models = run.root / "models"
            # hidden files (the teacher's lock, leakaudit.locks) are no model's: --force students must not delete
            # a lock another process may hold
            existing = ([p for p in models.glob("*") if p != run.teacher and not p.name.startswith(".")]
                        if models.is_dir() else [])
            planned = [run.model(m) for m in self.trained_models()] if self._plan or run.membership.is_file() else []
            return sorted(set(existing) | set(planned))
        # the literalness files count only where they exist: a run finished before they were written keeps the
        # output digest its markers hold (a deleted file is still noticed: the marker was written with it)
        from leakaudit.audit import NULL_SCORES_FILE

        since = {"teacher": [run.teacher_literalness], "report": [run.realism],
                 "attacks": [run.sample_literalness, run.root / NULL_SCORES_FILE]}
        return {
            "records": [run.records, run.teacher_records],
            "plan": [run.membership, run.plan_dir / "plan.json"],
            "teacher": [run.teacher],
            "signals": [run.root / "signals"],
            "attacks": [run.scores, run.leak_map, run.candidates_csv, run.audit_json],
            "report": [run.metrics_json, run.metrics_csv, run.blind_text_null, run.plots, run.report_html],
        }[stage] + [p for p in since.get(stage, []) if p.exists()]

    # ---- orchestration ----------------------------------------------------------------------------------
    def run_all(self, until: str | None = None) -> Path:
        """Validate everything (prepare: nothing written on bad input), then, holding the run directory's lock
        (another process running the same run is refused, exit 2), run the stages not finished earlier; with
        `until` (a stage name), stop after that stage (a later run_all resumes from the next one)."""
        if until is not None and until not in STAGES:
            raise ConfigError(f"until: unknown stage '{until}'; expected one of {list(STAGES)}")
        self.prepare()
        with run_exclusively(self.run.root):
            self._run_stages(until)
        return self.run.root

    def _run_stages(self, until: str | None = None) -> None:
        # freed step-sized blocks stay in the driver for reuse (the teacher's preparation, local jobs); Ray jobs set
        # it in their own processes (executors.call_job)
        set_allocator_policy(self.cfg.execution.allocator)
        if self.is_audit:
            from leakaudit.audit import recipe_line

            self.log(f"[audit] {recipe_line(self.reference_recipe())}")
        self._write_header()
        eta = self._stage_estimates()
        try:
            for i, stage in enumerate(STAGES):
                if i < self._todo_from:
                    self.log(f"[{stage}] skipped: finished earlier on the same inputs")
                else:
                    if eta and eta[0].get(stage):
                        from leakaudit.cost import duration_text

                        left = sum(eta[0].get(s, 0.0) for s in STAGES[i:])
                        self.log(f"[{stage}] started: about {duration_text(eta[0][stage])} for this stage, "
                                 f"{duration_text(left)} left for the study (rates measured on {eta[1]})")
                    start = time.time()
                    getattr(self, f"stage_{stage}")()
                    # the driver's freed working set (the teacher's ~5 GB, bench/results/teacher_memory_release.json)
                    # back to the OS before the next stage's jobs, which may be Ray workers on this machine
                    release_freed_memory()
                    self._mark(stage)
                    self.log(f"[{stage}] done in {time.time() - start:.1f} s")
                if stage == until:  # also when it was skipped: a resumed run_all(until=...) stops there too
                    break
        finally:
            self.close()

    def _stage_estimates(self) -> tuple[dict[str, float], str] | None:
        """leakaudit.cost's per-stage estimate for this machine class, for the ETA lines; None where no stored
        rates match this machine or the estimate cannot be made (it only informs: a run never fails on it)."""
        from leakaudit.cost import estimate_here

        try:
            return estimate_here(self)
        except (LeakauditError, OSError, KeyError, ValueError) as e:
            self.log(f"[eta] no estimate: {e}")
            return None

    def prepare(self, *, start_executor: bool = True) -> None:
        """Load and check everything in memory; write nothing. Raises InputError / ConfigError (exit 2).
        `start_executor=False` (a dry run): the executor is not started (no Ray instance, no worker)."""
        check_run_root(self.run.root)  # new, empty or a run leakaudit made; a writable place
        check_backend(self.cfg.execution)
        self._check_run_dir_config()
        self._check_model_refs()  # first: the records' token budget loads base_model's tokenizer
        if self.is_audit:
            cands, pop = self._audit_records()
            records, teacher_pool = cands + pop + self._audit_background + self._audit_null, []
            self._plan = self._audit_plan(cands, pop)
        else:
            records, teacher_pool, background, reference = self._study_records()
            self._plan = self._study_plan(records, background, reference)
            records = records + [r for extra in (background, reference) for d in sorted(extra) for r in extra[d]]
        self._records = unique_by_id(records)
        self._teacher_records = teacher_pool
        self._check_paths_inside()
        self._check_attack_signals()
        self._todo_from = self._check_stage_marks()
        self._check_saved_plan()
        if self._todo_from <= STAGES.index("signals") and self.api_target:
            # reachable, key accepted, log-probs returned: before any reference is trained
            from leakaudit.signals.api_stage import probe_api_target

            probe_api_target(self.cfg.audit, self.tokenizer)
        if start_executor and self._todo_from <= STAGES.index("signals"):
            # the executor's resources are known only once it runs (Ray: the cluster's GPUs and CPUs): start it now,
            # so a job asking for more than the cluster has is refused before the run's first file, not after the
            # teacher stage (it was: a CPU machine with the default gpus_per_student=1 failed after ~20 minutes)
            try:
                self.executor.start()
            except BaseException:
                self.close()
                raise

    def _check_paths_inside(self) -> None:
        """Every path of the run built from a name the user gave (domains through model ids) is a safe file name
        and resolves inside the run directory, before the first write."""
        from leakaudit.rundir import check_safe_name

        for model_id in self.plan().models:
            what = f"model id {model_id!r} (from the domain of the records or data.domains)"
            check_safe_name(model_id, what)
            for path in (self.run.model(model_id), self.run.fixed(model_id), self.run.fresh(model_id)):
                self.run.check_inside(path, what)

    def check_before_training(self) -> None:
        """What `leakaudit train` checks before it trains a model of this run outside run-study (before, nothing):
        study.yaml is the config the run was made with (its recorded hash; an edited one is refused as run-study
        refuses it), and the records and plan stages finished on this run's inputs. Writes nothing."""
        self._check_run_dir_config()
        if self._check_stage_marks() <= STAGES.index("plan"):
            raise InputError("the run's records and plan stages have not finished; start it with `leakaudit "
                             "run-study` first", path=str(self.run.root))

    def _check_saved_plan(self) -> None:
        """A resumed run trains and scores with the plan prepare() rebuilt from the config, while the report and
        `leakaudit train` read the one the plan stage saved: they must be one plan (plan code or a source can change
        between two calls while the config hash and the stage marks stay equal)."""
        if self._todo_from <= STAGES.index("plan"):
            return
        if not MembershipPlan.load(self.run.plan_dir).equals(self._plan):
            raise InputError("the membership plan rebuilt from this config differs from the one this run saved "
                             "(plan.json, membership.parquet): the plan code or its records changed since; rerun "
                             "with --force plan (every later stage is redone) or use another run directory",
                             path=str(self.run.root))

    def _check_run_dir_config(self) -> None:
        if not self.run.config.is_file():
            return
        from leakaudit.yamlio import read_yaml

        old = read_yaml(self.run.config) or {}
        old_hash = (old.get("_meta") or {}).get("config_hash")
        # str(): an unquoted hash of decimal digits only (~0.4% of hashes) reads back as an int
        if str(old_hash) != self.cfg.hash() and self.force_from > 0:
            what = "an audit" if "audit" in old and old.get("audit") else "a study"
            raise ConfigError(f"{self.run.root} holds {what} with a different config (hash {old_hash}, now "
                              f"{self.cfg.hash()}){self._precision_hint(old)}; choose another name/--out or "
                              "--force all")

    def _precision_hint(self, old: dict) -> str:
        """Why the hash differs when bf16_autocast resolved otherwise here than where the run was started."""
        hints = []
        for key, section, now in (("training.bf16_autocast", old.get("training"), self.cfg.training.bf16_autocast),
                                  ("teacher.prep.bf16_autocast", (old.get("teacher") or {}).get("prep"),
                                   self.cfg.teacher.prep.bf16_autocast)):
            before = section.get("bf16_autocast") if isinstance(section, dict) else None
            if isinstance(before, bool) and before != now:
                hints.append(f"{key} was {str(before).lower()} there, is {str(now).lower()} here ('auto' follows "
                             f"whether bf16 is native on this machine; --set {key}={str(before).lower()} goes on "
                             "as started)")
        return "; " + "; ".join(hints) if hints else ""

    def _check_model_refs(self) -> None:
        """Every model the run reads resolves, and a local one holds safetensors, before the run's first file (a
        directory of pickled weights passed here and failed at its first load, after the plan was written)."""
        from leakaudit.models import check_loads_without_code, check_safetensors_only, resolve_model_ref

        for name, ref in self.external_models().items():
            try:
                path = resolve_model_ref(ref)
                check_safetensors_only(path)
                if not self.cfg.trust_remote_code:
                    check_loads_without_code(path)
            except InputError as e:
                raise InputError(f"{model_ref_key(name)}: {e}") from None
        if self.cfg.trust_remote_code:
            self.log("notice: trust_remote_code is true: code shipped with these models may run on this machine: "
                     + ", ".join(f"{model_ref_key(n)} = {r}" for n, r in self.external_models().items()))
        if self.api_target:
            from leakaudit.signals.api_stage import check_api_target

            check_api_target(self.cfg.audit, self.cfg.signals.sampling)

    def _check_attack_signals(self) -> None:
        """A study's real targets must have every signal their attacks need, found now rather than after hours of
        training: the population comparison needs population records."""
        from attacks import get_attack
        from leakaudit.scoring import attack_specs

        if self.is_audit or self.cfg.data.n_population > 0:
            return
        needing = [a.name for a in attack_specs(self.cfg.attacks)
                   if {"population_target", "population_refs"} & set(get_attack(a.name).needs)]
        if needing:
            raise ConfigError(f"data.n_population: attacks {needing} compare each record against population "
                              "records; set data.n_population > 0 or leave them out of `attacks`")

    def _stage_inputs(self, stage: str, upstream: list[str]) -> str:
        """What a stage's results depend on: the config, the records this config gives (recomputed from the
        sources, so a source file changed under a finished run is noticed), the outputs of every earlier stage,
        and the content of models the run reads but does not make."""
        parts = {"stage": stage, "config": self.cfg.hash(), "upstream": upstream}
        if stage == "records":
            records = list(self.records().values())
            parts["records"] = hashlib.sha256(_jsonl_bytes(records) + _jsonl_bytes(self.teacher_records())).hexdigest()
        else:
            parts["models"] = {k: self._model_digest(r) for k, r in sorted(self.external_models().items())}
        if stage == "report":
            parts["redact"] = self.redact
        return stage_marks.inputs_hash(parts)

    def _model_digest(self, ref: str) -> str:
        """Each model's content digest once per run (every stage's inputs hash includes it)."""
        if ref not in self._digests:
            self._digests[ref] = stage_marks.model_digest(ref)
        return self._digests[ref]

    def _check_stage_marks(self) -> int:
        """Index of the first stage to run. Finished stages form a prefix; each one's marker must match its
        inputs and outputs (else InputError naming the stage), checked before anything is written or deleted."""
        upstream: list[str] = []
        for i, stage in enumerate(STAGES):
            mark = stage_marks.read_mark(self.run.root, stage)
            if i >= self.force_from or mark is None:
                return i
            if mark.get("inputs") != self._stage_inputs(stage, upstream):
                raise InputError(f"stage '{stage}' finished on other inputs than this run's (a source file, an "
                                 "earlier stage's outputs or a model it reads changed since); rerun with "
                                 f"--force {stage}", path=str(self.run.root))
            outputs = stage_marks.tree_digest(self.stage_outputs(stage), self.run.root)
            if outputs != mark.get("outputs"):
                if stage in REBUILT_WHEN_CHANGED:
                    return i
                raise InputError(f"outputs of stage '{stage}' ({', '.join(mark.get('paths', []))}) changed after "
                                 f"it finished (edited or truncated?); rerun with --force {stage}",
                                 path=str(self.run.root))
            upstream.append(mark["outputs"])
        return len(STAGES)

    def _write_header(self) -> None:
        from leakaudit.envinfo import environment

        self.run.root.mkdir(parents=True, exist_ok=True)
        for stage in STAGES[self._todo_from:]:
            stage_marks.remove_mark(self.run.root, stage)
        for stage in STAGES[self.force_from:]:
            for path in self.stage_outputs(stage):
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
        text = dump_config(self.cfg) + f"_meta:\n  config_hash: '{self.cfg.hash()}'\n"
        write_text(self.run.config, text)
        write_json(self.run.env, {**environment(self.cfg.seed), "precision": self.precision})

    def _mark(self, stage: str) -> None:
        i = STAGES.index(stage)
        upstream = [stage_marks.read_mark(self.run.root, s)["outputs"] for s in STAGES[:i]]
        stage_marks.write_mark(self.run.root, stage, self._stage_inputs(stage, upstream), self.stage_outputs(stage))

    # ---- records (in memory; checked before anything is written) -----------------------------------------
    def _study_records(self) -> tuple[list[Record], list[Record], dict[str, list[Record]], dict[str, list[Record]]]:
        """(candidates + population of every domain, teacher-only records, background records per domain,
        reference-only records per domain): disjoint slices of each domain's seeded shuffle, in that order
        (membership.split_pool / teacher_slice / background_slice / reference_slice)."""
        from leakaudit.data.sources import load_source

        data = self.cfg.data
        chosen: list[Record] = []
        teacher_pool: list[Record] = []
        background: dict[str, list[Record]] = {}
        reference: dict[str, list[Record]] = {}
        for domain, spec in data.domains.items():
            options = dict(spec.options)
            if spec.source == "file":
                options.setdefault("domain", domain)  # fills rows without a domain of their own
            pool = load_source(spec.source, seed=self.cfg.seed, **options)
            where = str(options.get("path") or f"source '{spec.source}'")
            lines = record_lines(Path(options["path"])) if spec.source == "file" else None
            check_unique(pool, path=where)
            pool, dropped = admit(pool, source=spec.source, domain=domain, configured=f"data.domains.{domain}",
                                  tokenizer=self.tokenizer, data=data, where=where, lines=lines)
            by_id = {r.record_id: r for r in pool}
            cand, popn = split_pool(list(by_id), data.n_candidates, data.n_population, self.cfg.seed, salt=domain,
                                    parts={"teacher": data.n_teacher_records, "background": data.n_background,
                                           "reference-only": data.n_reference_records})
            chosen += [by_id[r] for r in cand + popn]
            if data.n_teacher_records:
                teacher_ids = teacher_slice(list(by_id), data.n_candidates, data.n_population,
                                            data.n_teacher_records, self.cfg.seed, salt=domain)
                teacher_pool += [by_id[r] for r in teacher_ids]
            if data.n_background:
                background[domain] = [by_id[r] for r in background_slice(
                    list(by_id), data.n_candidates, data.n_population, data.n_teacher_records, data.n_background,
                    self.cfg.seed, salt=domain)]
            if data.n_reference_records:
                reference[domain] = [by_id[r] for r in reference_slice(
                    list(by_id), data.n_candidates, data.n_population, data.n_teacher_records, data.n_background,
                    data.n_reference_records, self.cfg.seed, salt=domain)]
            self.log(f"[records] {domain}: {len(pool)} from '{spec.source}' ({dropped} over the token budget "
                     f"dropped), using {len(cand)} candidates + {len(popn)} population"
                     + (f" + {data.n_teacher_records} teacher-only" if data.n_teacher_records else "")
                     + (f" + {data.n_background} background" if data.n_background else "")
                     + (f" + {data.n_reference_records} reference-only" if data.n_reference_records else ""))
        return chosen, teacher_pool, background, reference

    def _audit_records(self) -> tuple[list[Record], list[Record]]:
        """Candidates then population, as given: one domain, no record in both, every record within budget. An audit
        with --background also reads its background records (self._audit_background): none of them a candidate or
        a population record."""
        audit = self.cfg.audit
        files = [("candidates", Path(audit.candidates))]
        if audit.population:
            files.append(("population", Path(audit.population)))
        if audit.background:
            files.append(("background", Path(audit.background)))
        if audit.null_sample:
            files.append(("null sample", Path(audit.null_sample)))
        loaded: dict[str, list[Record]] = {}
        domain = None
        candidates: dict[str, str] = {}  # identities (same_record_keys) of the candidates -> their ids
        population: dict[str, str] = {}
        background: dict[str, str] = {}
        from leakaudit.data.audit_inputs import ColumnMap, read_records

        columns = ColumnMap(prompt=audit.prompt_column, privileged=audit.privileged_column, record_id=audit.id_column,
                            domain=audit.domain)
        for role, path in files:
            recs, lines = read_records(path, columns)
            for r, line in zip(recs, lines):
                domain = domain or r.domain
                if r.domain != domain:
                    raise InputError(f"has domain '{r.domain}', but the audit's records are of domain '{domain}' "
                                     "(one audit scores one domain)", path=str(path), line=line,
                                     record_id=r.record_id, field="domain")
                if role == "candidates":
                    check_audit_label(r, path=str(path), line=line)
                by_id, by_text = same_record_keys(r)
                if role in ("population", "background") and (by_id in candidates or by_text in candidates):
                    same = "" if by_id in candidates else f" (the text of candidate {candidates[by_text]})"
                    raise InputError(f"is also a candidate{same}; the {role} (what references train on) must "
                                     "exclude every candidate", path=str(path), line=line, record_id=r.record_id)
                if role == "null sample":
                    for other, keys in (("candidate", candidates), ("population record", population),
                                        ("background record", background)):
                        if by_id in keys or by_text in keys:
                            raise InputError(f"is also a {other}; the null sample must be known non-members that no "
                                             "reference trains on", path=str(path), line=line, record_id=r.record_id)
                if role == "background" and (by_id in population or by_text in population):
                    raise InputError("is also a population record; the background (trained on by every reference) "
                                     "must exclude the population (RMIA's held-out records must stay OUT)",
                                     path=str(path), line=line, record_id=r.record_id)
            if role in ("background", "null sample"):
                check_unique(recs, path=str(path))
            self._check_budget(recs, str(path), lines)
            loaded[role] = recs
            candidates = {key: r.record_id for r in loaded["candidates"] for key in same_record_keys(r)}
            population = {key: r.record_id for r in loaded.get("population", []) for key in same_record_keys(r)}
            background = {key: r.record_id for r in loaded.get("background", []) for key in same_record_keys(r)}
        if not audit.references and not loaded.get("population"):
            raise InputError("--population is required to train references (or give --references)",
                             field="population")
        if not loaded.get("population") and not loaded.get("null sample"):
            raise InputError("--population or --null-sample is required: the verdict compares the candidates with "
                             "known non-members that no reference trained on", field="population")
        self._audit_background = loaded.get("background", [])
        self._audit_null = loaded.get("null sample", [])
        return loaded["candidates"], loaded.get("population", [])

    def _check_budget(self, records: list[Record], where: str, lines: list[int] | None) -> None:
        check_budget(records, self.tokenizer, self.cfg.data, where=where, lines=lines)

    def _study_plan(self, records: list[Record], background: dict[str, list[Record]],
                    reference: dict[str, list[Record]]) -> MembershipPlan:
        pools: dict[str, list[str]] = {}
        for r in records:
            pools.setdefault(r.domain, []).append(r.record_id)
        p = self.cfg.plan
        return keep_matrix_plan(pools, n_students=p.n_students, n_candidates=self.cfg.data.n_candidates,
                                n_population=self.cfg.data.n_population, seed=self.cfg.seed,
                                null_student=p.null_student, n_null_students=p.n_null_students,
                                keep_design=p.keep_design,
                                background={d: [r.record_id for r in recs] for d, recs in background.items()},
                                n_offline=p.n_offline_references,
                                reference_records={d: [r.record_id for r in recs] for d, recs in reference.items()})

    def _audit_plan(self, cands: list[Record], pop: list[Record]) -> MembershipPlan:
        """The disjoint design with the given target; its labels are the candidates' meta.is_member when every
        candidate has one."""
        audit = self.cfg.audit
        labels = [c.meta.get("is_member") for c in cands]  # each true, false or absent (check_audit_label)
        target_labels = ({c.record_id: bool(v) for c, v in zip(cands, labels)}
                         if all(v is not None for v in labels) else None)
        from leakaudit.audit import split_null_sample

        domain = cands[0].domain
        pop_ids = [p.record_id for p in pop]
        if self._audit_null:
            null = [r.record_id for r in self._audit_null]
        else:  # the null sample is split off the population: no reference trains on it
            null, pop_ids = split_null_sample(pop_ids, audit.null_size, self.cfg.seed, domain)
        held_out = 0 if audit.references else max(1, len(pop_ids) // AUDIT_HELD_OUT_FRACTION)
        per_ref = audit.records_per_reference or max(1, (len(pop_ids) - held_out) // 2)
        return disjoint_plan([c.record_id for c in cands], pop_ids, domain=domain,
                             n_references=audit.n_references, records_per_reference=per_ref, seed=self.cfg.seed,
                             external_references=audit.references, target_labels=target_labels,
                             n_held_out=held_out, background=[r.record_id for r in self._audit_background],
                             null_sample=null)

    # ---- stages -----------------------------------------------------------------------------------------
    def stage_records(self) -> None:
        # teacher_records.jsonl first: records.jsonl is what later stages read
        if self.teacher_records():
            write_jsonl(self.teacher_records(), self.run.teacher_records)
        write_jsonl(list(self.records().values()), self.run.records)

    def stage_plan(self) -> None:
        self.plan().save(self.run.plan_dir)

    def stage_teacher(self) -> None:
        """Prepare the teacher (kind 'prepared' or 'restated'), then measure how literal the teacher is, whatever
        its kind (teacher_literalness.json)."""
        teacher = self.cfg.teacher
        # one preparer at a time: a job array of `leakaudit train --model-id` calls this from every job; the processes
        # of one `accelerate launch` prepare it together instead (no lock), and only its rank 0 measures it
        world, rank = launch_ranks()
        with made_once(self.run.teacher) if world == 1 else contextlib.nullcontext():
            if teacher.prepared and not is_done(self.run.teacher):
                from shadow_models.teacher_prep import prepare_teacher

                population, candidates = self.teacher_sft_records()
                prep = with_seed(teacher.prep, stage_seed(self.cfg.seed, "teacher"))
                self.log(f"[teacher] preparing a teacher ({teacher.kind}: SFT target {teacher.sft_target}) on "
                         f"{len(population)} population and teacher-only records (never candidates)")
                prepare_teacher(self.cfg.base_model, population, self.run.teacher, prep, forbidden_ids=candidates,
                                trust_remote_code=self.cfg.trust_remote_code, sft_target=teacher.sft_target)
            if rank == 0:
                self._measure_teacher()

    def teacher_sft_records(self) -> tuple[list[Record], list[str]]:
        """(records a prepared teacher is fine-tuned on: the population, then the teacher-only records; every
        candidate id: prepare_teacher refuses to train on any of them)."""
        plan, records = self.plan(), self.records()
        population = [records[r] for d in sorted(plan.population) for r in plan.population[d]]
        population += self.teacher_records()
        candidates = [r for d in plan.candidates for r in plan.candidates[d]]
        return population, candidates

    def _measure_teacher(self) -> None:
        """teacher_literalness.json: which teacher this run uses and its log p of the candidates' privileged
        texts (and restatements) with vs without context (leakaudit.literalness)."""
        from leakaudit.literalness import measure_teacher, summary_line

        if self.run.teacher_literalness.is_file():
            return
        plan, records = self.plan(), self.records()
        teacher = self.cfg.teacher
        ref = self.teacher_model() or self.cfg.base_model
        s = self.cfg.signals
        cands = [records[r] for d in sorted(plan.candidates) for r in plan.candidates[d]]
        measured = measure_teacher(ref, self.tokenizer, cands, self.cfg.training.teacher_template,
                                   backend=s.backend, trust_remote_code=self.cfg.trust_remote_code,
                                   score_batch_size=s.score_batch_size, autocast_bf16=s.autocast_bf16,
                                   vllm_stats_topk=s.vllm_stats_topk, share_prefix=s.share_prefix,
                                   share_prefill=s.share_prefill)
        meta = read_json(self.run.teacher / "meta.json") if teacher.prepared else {}
        sft = {k: meta[k] for k in ("n_records", "n_records_given", "restate_rules", "left_out_record_ids")
               if k in meta}
        out = {"teacher": teacher.kind,
               "teacher_model": "base" if teacher.kind == "self" else "models/_teacher" if teacher.prepared else ref,
               "sft_target": teacher.sft_target, "sft": sft or None, **measured}
        write_json(self.run.teacher_literalness, out)
        self.log(f"[teacher] {summary_line(out, None)}")

    # ---- jobs: what the executor runs (leakaudit.study_jobs calls back into these methods) ------------------
    def job_args(self, **kwargs) -> dict:
        """A job's plain-data kwargs: the resolved config with an absolute out_root (a worker rebuilds this Study
        from it and reads the run directory), whether the job draws its own progress bars (in process only)."""
        config = self.cfg.to_dict()
        config["out_root"] = str(Path(self.cfg.out_root).resolve())
        return {"config": config, "progress": self.progress and self.executor.in_process, **kwargs}

    def run_jobs(self, stage: str, jobs: list[Job], detail: Callable[[], str] | None = None) -> dict:
        """Run a stage's jobs on the run's executor with a progress bar; every failure is logged with its job id and
        error, then JobsFailed (naming each) is raised once all jobs have finished."""
        from leakaudit.progress import StageProgress

        if not jobs:
            return {}
        with StageProgress(stage, len(jobs), detail=detail, enabled=self.progress) as bar:
            out = self.executor.run_jobs(jobs, stage=stage, progress=bar)
        for f in out.failures:
            self.log(f"[{stage}] {f.job_id} failed: {f.error}")
            if f.detail:
                self.log(f.detail.rstrip())
        if out.failures:
            raise JobsFailed(stage, out.failures, len(jobs))
        return out.results

    def stage_students(self) -> None:
        """One job per student not yet DONE (leakaudit.study_jobs.train_student_job); DONE students are checked
        against the plan here."""
        from leakaudit.progress import running_line, student_statuses
        from shadow_models.plan import plan_steps

        todo = []
        for model_id in self.trained_models():
            if is_done(self.run.model(model_id)):
                self._check_trained_on(model_id)
            else:
                todo.append(model_id)
        t = self.cfg.training
        n_steps = {m: len(plan_steps(len(self.plan().members(m)), t.epochs, t.batch_size, 0)) for m in todo}
        jobs = [Job(m, "leakaudit.study_jobs:train_student_job", self.job_args(model_id=m)) for m in todo]
        started = time.time()  # staging ledgers older than this are a killed run's (progress.student_statuses)
        self.run_jobs("students", jobs,
                      detail=lambda: running_line(student_statuses(self.run, todo, n_steps, since=started)))

    def _check_trained_on(self, model_id: str) -> None:
        out = self.run.model(model_id)
        trained_on = read_json(out / "meta.json").get("record_ids")
        if sorted(trained_on or []) != sorted(self.plan().members(model_id)):
            raise InputError(f"models/{model_id} was trained on other records than the plan gives it; "
                             "rerun with --force students", path=str(out))

    def train_one(self, model_id: str, step_hook: Callable[[dict], None] | None = None,
                  epoch_hook: Callable[[int, Any], None] | None = None) -> None:
        """Train one model of the plan (skipped when its DONE marker exists and it was trained on the plan's
        records for it). Its seed derives from the master seed and model_id and is recorded in its meta.json.
        `step_hook` and `epoch_hook` reach shadow_models.train_student (after each step's ledger line; after each
        epoch's last step, with the model)."""
        import shadow_models

        out = self.run.model(model_id)
        plan, records = self.plan(), self.records()
        member_ids = plan.members(model_id)
        if is_done(out):
            self._check_trained_on(model_id)
            return
        training = with_seed(self.cfg.training, stage_seed(self.cfg.seed, "train", model_id))
        # only the hooks given: stand-ins for train_student in tests (tests/test_positive_control.py) take neither
        hooks = {k: v for k, v in (("step_hook", step_hook), ("epoch_hook", epoch_hook)) if v is not None}
        self.log(f"[students] training {model_id} on {len(member_ids)} records")
        shadow_models.train_student(self.cfg.base_model, [records[r] for r in member_ids], out, training,
                                    teacher_model=self.teacher_model(), model_id=model_id, progress=self.progress,
                                    trust_remote_code=self.cfg.trust_remote_code,
                                    **hooks)

    def stage_signals(self) -> None:
        """1) one job per target without trajectories: sample them (sample_one); 2) once all are sampled, one job per
        model with something left to score (score_one); 3) each target's fresh DONE, written here once every model
        it needs has scored. Every job skips what is already stored, so a rerun redoes only what is missing."""
        from leakaudit.assemble import BASE_ID
        from leakaudit.signals.store import has_logp, has_trajectories

        plan = self.plan()
        pending = [v for v in plan.views() if not is_done(self.run.fresh(v.target))]
        # 1) fresh trajectories from each target (student prompt only)
        self.run_jobs("sample", [Job(f"sample:{v.target}", "leakaudit.study_jobs:sample_job",
                                     self.job_args(target=v.target))
                                 for v in pending if not has_trajectories(self.run.fresh(v.target))])
        # 2) every model scores, once loaded: fixed texts of its domain(s) and the trajectories that need it
        scorers = self.fresh_scorers([v.target for v in pending])
        needs: dict[str, list[tuple[str, list[str] | None]]] = {}
        for v in pending:
            for m, record_ids in scorers[v.target].items():
                needs.setdefault(m, []).append((v.target, record_ids))
        jobs = []
        for m in [BASE_ID, *plan.models]:
            fixed_missing = not self.run.fixed(m).is_file()
            # every target the model scores, whenever one lacks its scores: score_fresh_all batches them together,
            # and a rerun must batch them as the uninterrupted run did (it writes only the missing files)
            fresh = [[t, ids] for t, ids in needs.get(m, [])]
            if all(has_logp(self.run.fresh(t), m) for t, _ in fresh):
                fresh = []
            if fixed_missing or fresh:
                jobs.append(Job(f"score:{m}", "leakaudit.study_jobs:score_job",
                                self.job_args(model_id=m, fixed=fixed_missing, fresh=fresh)))
        self.run_jobs("score", jobs)
        for v in pending:
            mark_done(self.run.fresh(v.target), {"scored_by": scorers[v.target]})

    def fresh_scorers(self, targets: list[str]) -> dict[str, dict[str, list[str] | None]]:
        """target -> {model_id: the record ids of the target's trajectories that model scores, None = all}: the
        target itself, the base, its matched references (for the records they serve) and the domain's offline
        references (every candidate). Recorded in each target's fresh DONE marker as `scored_by`."""
        from leakaudit.assemble import BASE_ID

        plan = self.plan()
        k_in, k_out = plan.reference_counts(self.cfg.plan.n_matched_references)
        views = {v.target: v for v in plan.views()}
        scorers = {t: plan.references(views[t], k_in, k_out).fresh_scorers(t, BASE_ID) for t in targets}
        for v in plan.offline_views():  # the offline references score every candidate of every target
            if v.target in scorers:
                for m, record_ids in plan.references(v, 0, 0).fresh_scorers(v.target, BASE_ID).items():
                    scorers[v.target].setdefault(m, record_ids)
        return scorers

    def sample_one(self, target: str) -> None:
        """Sample a target's fresh trajectories of its domain's candidates (seed derived from the master seed and
        the target); nothing when they are stored already."""
        from leakaudit.signals.stages import sample_fresh

        plan, records = self.plan(), self.records()
        view = next(v for v in plan.views() if v.target == target)
        sampling = with_seed(self.cfg.signals.sampling, stage_seed(self.cfg.seed, "sample", target))
        cands = [records[r] for r in plan.candidates[view.domain]]
        with self._backend(target) as backend:
            if self.api_target and target == TARGET_ID:
                from leakaudit.signals.api_stage import sample_fresh_api

                sample_fresh_api(backend, self.tokenizer, cands, sampling, self.run.fresh(target))
            else:
                sample_fresh(backend, self.tokenizer, cands, sampling, self.run.fresh(target))

    def score_one(self, model_id: str, fixed: bool, fresh: list) -> None:
        """Load one model once; score its domain's fixed texts (`fixed`) and the targets' trajectories it is asked
        to (`fresh`: [target, record_ids or None] pairs). Each output is skipped when stored already."""
        from leakaudit.assemble import BASE_ID
        from leakaudit.signals.stages import score_fixed, score_fresh_all

        plan, records = self.plan(), self.records()
        with self._backend(model_id) as backend:
            # an API target without prompt log-probs cannot score fixed texts (its fixed attacks are skipped)
            if fixed and getattr(backend, "scores_fixed_texts", True):
                domains = sorted(plan.candidates) if model_id == BASE_ID else [plan.models[model_id]["domain"]]
                recs = [records[r] for d in domains for r in plan.candidates[d] + plan.population[d]]
                score_fixed(backend, self.tokenizer, recs, self.run.fixed(model_id), vocab_stats=True)
            todo = []
            for target, record_ids in fresh:
                if record_ids is not None:
                    record_ids = [r for r in record_ids if r not in self._excluded(target)]
                todo.append((self.run.fresh(target), record_ids))
            if todo:
                score_fresh_all(backend, model_id, todo)

    def _excluded(self, target: str) -> dict[str, str]:
        """Records of `target` whose API trajectories could not be recovered (none for a local target)."""
        from leakaudit.signals.api_stage import excluded_records

        return excluded_records(self.run.fresh(target)) if self.api_target and target == TARGET_ID else {}

    def _backend(self, model_id: str):
        from leakaudit.signals.backend import open_backend

        if model_id == TARGET_ID and self.api_target:
            from leakaudit.signals.api_stage import open_api_backend

            return open_api_backend(self.cfg.audit, self.tokenizer, self.run.fresh(TARGET_ID))
        s = self.cfg.signals
        return open_backend(s.backend, self.model_ref(model_id), trust_remote_code=self.cfg.trust_remote_code,
                            score_batch_size=s.score_batch_size, autocast_bf16=s.autocast_bf16,
                            vllm_stats_topk=s.vllm_stats_topk, share_prefix=s.share_prefix,
                            share_prefill=s.share_prefill)

    def stage_attacks(self) -> None:
        from leakaudit.scoring import score_targets

        plan, records = self.plan(), self.records()
        scores, leak_map = score_targets(self.run, plan, records, self.cfg, self.tokenizer, progress=self.progress,
                                         log=self.log)
        if self.api_target:
            from leakaudit.signals.api_stage import drop_excluded

            scores = drop_excluded(scores, TARGET_ID, self._excluded(TARGET_ID))
        if self.is_audit:  # the null sample's rows go beside scores.parquet, which holds the candidates' rows only
            from leakaudit.audit import NULL_SCORES_FILE

            null_ids = {r for d in plan.candidates for r in plan.null_sample(d)}
            is_null = scores.record_id.isin(null_ids)
            with atomic_path(self.run.root / NULL_SCORES_FILE) as tmp:
                scores[is_null].to_parquet(tmp, index=False)
            null_scores, scores = scores[is_null].reset_index(drop=True), scores[~is_null].reset_index(drop=True)
        with atomic_path(self.run.scores) as tmp:
            scores.to_parquet(tmp, index=False)
        if leak_map is not None:
            write_json(self.run.leak_map, leak_map)
        if self.is_audit:
            self._write_audit_table(scores, null_scores)
        from leakaudit.literalness import load, sample_literalness, summary_line

        write_json(self.run.sample_literalness, sample_literalness(self.run, plan, records, self.tokenizer))
        self.log(f"[attacks] {summary_line(*load(self.run.root))}")

    def _write_audit_table(self, scores, null_scores) -> None:
        """candidates.csv: one row per candidate, one column per attack (higher = more likely a member), then the
        primary attack's conformal p_value and whether it is flagged; and audit.json: what was audited with what
        (the references' recipe, the attacks that ran) and the verdict (leakaudit.verdict.audit_verdict)."""
        plan = self.plan()
        cand_ids = [r for d in plan.candidates for r in plan.audit_candidates(d)]
        table = (scores.pivot(index="record_id", columns="attack", values="score")
                 .reindex(index=cand_ids, columns=list(dict.fromkeys(scores.attack))))
        labels = {r: v for r, v in plan.labels(TARGET_ID).items() if r in set(cand_ids)}
        if labels:
            table["is_member"] = [labels[r] for r in cand_ids]
        verdict = self._verdict(table, null_scores, cand_ids, labels)
        table["p_value"] = verdict["p_values"]
        table["flagged"] = verdict["flagged"]
        self.log(f"[verdict] {verdict['headline']}")
        with atomic_path(self.run.candidates_csv) as tmp:
            table.reset_index().to_csv(tmp, index=False)
        refs = {m: self.model_ref(m) for m, info in plan.models.items() if info["role"] == "reference"}
        write_json(self.run.audit_json, {
            "target": self.cfg.audit.target, "base_model": self.cfg.base_model, "references": refs,
            "references_trained_here": not self.cfg.audit.references,
            "teacher": self.cfg.teacher.kind, "loss": self.cfg.training.loss,
            "reference_recipe": self.reference_recipe(),
            "attacks": {label: {"name": g.attack_name.iloc[0], "params": json.loads(g.params.iloc[0])}
                        for label, g in scores.groupby("attack", sort=False)},
            "n_candidates": len(cand_ids), "n_population": sum(map(len, plan.population.values())),
            "labels": bool(labels), "config_hash": self.cfg.hash(), "verdict": verdict,
            **self._api_section(scores)})

    def _verdict(self, table, null_scores, cand_ids: list[str], labels: dict[str, bool]) -> dict:
        """leakaudit.verdict.audit_verdict over the candidates' table (record x attack) and the null sample's rows,
        with the blind text check (a text-only classifier, candidates vs null sample)."""
        import numpy as np

        from leakaudit.audit import null_source_words
        from leakaudit.verdict import BLIND_ATTACK, PRIMARY_ATTACK, audit_verdict

        plan, audit = self.plan(), self.cfg.audit
        null_ids = [r for d in plan.candidates for r in plan.null_sample(d)]
        null_table = (null_scores.pivot(index="record_id", columns="attack", values="score")
                      .reindex(index=null_ids))
        attacks = [a for a in dict.fromkeys(null_scores.attack) if a != BLIND_ATTACK and a in table.columns]
        scores = {a: (table[a].to_numpy(dtype=float), null_table[a].to_numpy(dtype=float)) for a in attacks}
        n_pop = sum(len(v) for v in plan.population.values())
        return audit_verdict(cand_ids, scores, primary=PRIMARY_ATTACK, fdr=audit.fdr, fpr=audit.fpr,
                             labels=np.array([labels[r] for r in cand_ids]) if labels else None,
                             blind=self._blind_check(cand_ids, null_ids),
                             null_source=null_source_words(self.cfg, len(null_ids), n_pop),
                             n_boot=self.cfg.metrics.n_boot, seed=self.cfg.metrics.seed)

    def _blind_check(self, cand_ids: list[str], null_ids: list[str]):
        """(candidates' [N], null sample's [Z]) cross-validated blind text scores (candidate = 1, null = 0): the
        check that they are drawn alike; None when there are too few records to cross-validate."""
        import numpy as np

        from attacks import AttackInputs, run_attack
        from attacks.errors import AttackInputError as _InputError
        from leakaudit.scoring import attack_specs
        from leakaudit.verdict import BLIND_ATTACK

        records = self.records()
        params = next((a.params for a in attack_specs(self.cfg.attacks) if a.name == BLIND_ATTACK), {})
        ids = cand_ids + null_ids
        inputs = AttackInputs(record_ids=ids, texts=[records[r].privileged for r in ids],
                              labels=np.r_[np.ones(len(cand_ids), bool), np.zeros(len(null_ids), bool)])
        try:
            s = run_attack(BLIND_ATTACK, inputs, params)
        except _InputError as e:
            self.log(f"[verdict] blind text check not run: {e}")
            return None
        return s[:len(cand_ids)], s[len(cand_ids):]

    def _api_section(self, scores) -> dict:
        """{"api": ...} for an API target's audit.json (leakaudit.signals.api_stage.api_summary), else {}."""
        if not self.api_target:
            return {}
        from leakaudit.scoring import attack_specs
        from leakaudit.signals.api_stage import api_summary

        ran = sorted(set(scores.loc[scores.target == TARGET_ID, "attack"]))
        summary = api_summary(self.run.fresh(TARGET_ID), attack_specs(self.cfg.attacks), ran)
        if summary is not None:
            skipped = summary["attacks"]["skipped"]
            self.log(f"[attacks] API target: ran {summary['attacks']['run']}; skipped {sorted(skipped)}; "
                     f"{summary['n_excluded']} of {summary['n_requested']} candidates excluded (token ids not "
                     "recoverable)")
        return {"api": summary} if summary is not None else {}

    def reference_recipe(self) -> dict:
        """An audit's reference_recipe (leakaudit.audit.reference_recipe): teacher, loss, passes, ... and where
        each came from."""
        from leakaudit.audit import reference_recipe

        return reference_recipe(self.cfg, self.plan(), self.recipe_sources)

    def stage_report(self) -> None:
        import pandas as pd

        from leakaudit.report import build_report

        labels = pd.read_parquet(self.run.scores, columns=["is_member"]).is_member
        if labels.isna().all() or labels.dropna().nunique() < 2:
            from leakaudit.report.verdict_section import verdict_page

            page = verdict_page(self.run.root) if self.is_audit else None
            if page is not None:  # no metrics without labels: the report is the verdict against the null sample
                write_text(self.run.report_html, page)
            self.log("[report] no ground-truth labels with both classes (meta.is_member): the verdict and "
                     "per-candidate p-values only, no metrics")
            return
        build_report(self.run.root, redact=self.redact, n_boot=self.cfg.metrics.n_boot, seed=self.cfg.metrics.seed)
        from leakaudit.realism import load as load_realism, summary_line as realism_line

        self.log(f"[report] {realism_line(load_realism(self.run.root))}")
