"""run-study: records → plan → (teacher) → students → signals → attacks → report, resumable.

Each stage knows its outputs; a stage whose outputs are complete is skipped, so a crash loses only the stage
in flight. ``force`` names stages to redo; forcing a stage also redoes every later stage, because their inputs
change. A run directory holding a different config is refused rather than silently mixed.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable

from tqdm.auto import tqdm

from leakaudit.config import StudyConfig, dump_config
from leakaudit.data.records import Record, check_token_budget, check_unique, read_jsonl, write_jsonl
from leakaudit.errors import ConfigError
from leakaudit.io import atomic_path, is_done, mark_done, write_json, write_text
from leakaudit.membership import MembershipPlan, _stable_seed, keep_matrix_plan, split_pool, teacher_slice
from leakaudit.rundir import RunDir

STAGES = ("records", "plan", "teacher", "students", "signals", "attacks", "report")


def stage_seed(master: int, *parts: object) -> int:
    """A per-stage, per-model seed derived from the master seed (recorded wherever it is used)."""
    return _stable_seed(master, *parts) % (2**31 - 1)


class Study:
    """One study run directory and its stages. `log` receives one-line progress messages."""

    def __init__(self, cfg: StudyConfig, *, force: Iterable[str] = (), log: Callable[[str], None] = print,
                 progress: bool = True):
        self.cfg = cfg
        self.run = RunDir(cfg.run_dir)
        self.log = log
        self.progress = progress
        force = set(force)
        unknown = force - set(STAGES) - {"all"}
        if unknown:
            raise ConfigError(f"--force: unknown stages {sorted(unknown)}; stages are {list(STAGES)} or 'all'")
        if "all" in force:
            force = set(STAGES)
        self.force_from = min((STAGES.index(s) for s in force), default=len(STAGES))
        self._tokenizer = None
        self._records: dict[str, Record] | None = None
        self._plan: MembershipPlan | None = None

    # ---- helpers ----------------------------------------------------------------------------------------
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from leakaudit.models import load_tokenizer

            self._tokenizer = load_tokenizer(self.cfg.base_model, trust_remote_code=self.cfg.trust_remote_code)
        return self._tokenizer

    def stage_outputs(self, stage: str) -> list[Path]:
        """Files and directories a stage writes (what --force removes)."""
        run = self.run
        models = run.root / "models"
        return {
            "records": [run.records, run.teacher_records],
            "plan": [run.membership, run.plan_dir / "plan.json"],
            "teacher": [run.teacher],
            "students": [p for p in models.glob("*") if p != run.teacher] if models.is_dir() else [],
            "signals": [run.root / "signals"],
            "attacks": [run.scores, run.leak_map],
            "report": [run.metrics_json, run.metrics_csv, run.plots, run.report_html],
        }[stage]

    def _clear_forced_outputs(self) -> None:
        for stage in STAGES[self.force_from:]:
            for path in self.stage_outputs(stage):
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()

    def records(self) -> dict[str, Record]:
        """The run's records by id, read once (records.jsonl never changes after its stage)."""
        if self._records is None:
            self._records = {r.record_id: r for r in read_jsonl(self.run.records)}
        return self._records

    def plan(self) -> MembershipPlan:
        """The run's membership plan, read once (it never changes after its stage)."""
        if self._plan is None:
            self._plan = MembershipPlan.load(self.run.plan_dir)
        return self._plan

    def teacher_model(self) -> str | None:
        kind = self.cfg.teacher.kind
        if kind == "self":
            return None
        if kind == "prepared":
            return str(self.run.teacher)
        return kind

    # ---- orchestration ----------------------------------------------------------------------------------
    def run_all(self) -> Path:
        self._check_config()
        for stage in STAGES:
            start = time.time()
            getattr(self, f"stage_{stage}")()
            self.log(f"[{stage}] done in {time.time() - start:.1f} s")
        return self.run.root

    def _check_config(self) -> None:
        from leakaudit.envinfo import environment

        root = self.run.root
        if self.run.config.is_file():
            import yaml

            old = yaml.safe_load(self.run.config.read_text(encoding="utf-8")) or {}
            old_hash = (old.get("_meta") or {}).get("config_hash")
            if old_hash != self.cfg.hash() and self.force_from > 0:
                raise ConfigError(f"{root} holds a study with a different config (hash {old_hash}, now "
                                  f"{self.cfg.hash()}); choose another name (--set name=...) or --force all")
        root.mkdir(parents=True, exist_ok=True)
        self._clear_forced_outputs()
        text = dump_config(self.cfg) + f"_meta:\n  config_hash: {self.cfg.hash()}\n"
        write_text(self.run.config, text)
        write_json(self.run.env, environment(self.cfg.seed))

    # ---- stages -----------------------------------------------------------------------------------------
    def stage_records(self) -> None:
        if self.run.records.is_file():
            return
        from leakaudit.data.sources import load_source

        data = self.cfg.data
        tok = self.tokenizer
        chosen: list[Record] = []
        teacher_pool: list[Record] = []
        for domain, spec in data.domains.items():
            pool = load_source(spec.source, seed=self.cfg.seed, **spec.options)
            pool = [r if r.domain == domain else dataclasses.replace(r, domain=domain, record_id="") for r in pool]
            check_unique(pool, path=f"source '{spec.source}'")
            if data.drop_over_budget:
                kept = [r for r in pool if self._within_budget(r)]
                dropped = len(pool) - len(kept)
                pool = kept
            else:
                check_token_budget([dataclasses.replace(r, privileged="x") for r in pool], tok,
                                   data.max_prompt_tokens, path=f"source '{spec.source}'")
                check_token_budget([dataclasses.replace(r, prompt="x") for r in pool], tok,
                                   data.max_privileged_tokens, path=f"source '{spec.source}'")
                dropped = 0
            by_id = {r.record_id: r for r in pool}
            cand, popn = split_pool(list(by_id), data.n_candidates, data.n_population, self.cfg.seed, salt=domain,
                                    n_teacher=data.n_teacher_records)
            chosen += [by_id[r] for r in cand + popn]
            if data.n_teacher_records:
                teacher_ids = teacher_slice(list(by_id), data.n_candidates, data.n_population,
                                            data.n_teacher_records, self.cfg.seed, salt=domain)
                teacher_pool += [by_id[r] for r in teacher_ids]
            self.log(f"[records] {domain}: {len(pool)} from '{spec.source}' ({dropped} over the token budget "
                     f"dropped), using {len(cand)} candidates + {len(popn)} population"
                     + (f" + {data.n_teacher_records} teacher-only" if data.n_teacher_records else ""))
        # teacher_records.jsonl first: records.jsonl is the stage's completion mark
        if teacher_pool:
            write_jsonl(teacher_pool, self.run.teacher_records)
        write_jsonl(chosen, self.run.records)

    def stage_plan(self) -> None:
        if self.run.membership.is_file():
            return
        pools: dict[str, list[str]] = {}
        for r in self.records().values():
            pools.setdefault(r.domain, []).append(r.record_id)
        plan = keep_matrix_plan(pools, n_students=self.cfg.plan.n_students, n_candidates=self.cfg.data.n_candidates,
                                n_population=self.cfg.data.n_population, seed=self.cfg.seed,
                                null_student=self.cfg.plan.null_student, keep_design=self.cfg.plan.keep_design)
        plan.save(self.run.plan_dir)

    def stage_teacher(self) -> None:
        if self.cfg.teacher.kind != "prepared":
            return
        out = self.run.teacher
        if is_done(out):
            return
        from shadow_models.teacher_prep import TeacherPrepConfig, prepare_teacher

        plan, records = self.plan(), self.records()
        population = [records[r] for d in sorted(plan.population) for r in plan.population[d]]
        if self.cfg.data.n_teacher_records:
            population += read_jsonl(self.run.teacher_records)
        candidates = [r for d in plan.candidates for r in plan.candidates[d]]
        prep = dict(self.cfg.teacher.prep)
        prep.setdefault("seed", stage_seed(self.cfg.seed, "teacher"))
        self.log(f"[teacher] preparing a teacher on {len(population)} population and teacher-only records "
                 f"(never candidates)")
        prepare_teacher(self.cfg.base_model, population, out, TeacherPrepConfig(**prep), forbidden_ids=candidates)

    def stage_students(self) -> None:
        for model_id in tqdm(list(self.plan().models), desc="students", disable=not self.progress):
            self.train_one(model_id)

    def train_one(self, model_id: str) -> None:
        """Train one student of the plan (skipped when its DONE marker exists). Its seed derives from the
        master seed and model_id and is recorded in its meta.json."""
        from shadow_models import OPDConfig, train_student

        out = self.run.model(model_id)
        if is_done(out):
            return
        plan, records = self.plan(), self.records()
        training = dict(self.cfg.training)
        training["seed"] = stage_seed(self.cfg.seed, "train", model_id)
        members = [records[r] for r in plan.members(model_id)]
        self.log(f"[students] training {model_id} on {len(members)} records")
        train_student(self.cfg.base_model, members, out, OPDConfig(**training), teacher_model=self.teacher_model(),
                      model_id=model_id, progress=self.progress)

    def _within_budget(self, record: Record) -> bool:
        n_prompt = len(self.tokenizer(record.prompt, add_special_tokens=False)["input_ids"])
        n_priv = len(self.tokenizer(record.privileged, add_special_tokens=False)["input_ids"])
        return n_prompt <= self.cfg.data.max_prompt_tokens and n_priv <= self.cfg.data.max_privileged_tokens

    def model_ref(self, model_id: str) -> str:
        from leakaudit.assemble import BASE_ID

        return self.cfg.base_model if model_id == BASE_ID else str(self.run.model(model_id))

    def stage_signals(self) -> None:
        from leakaudit.assemble import BASE_ID, fresh_scorers, target_views
        from leakaudit.signals.backend import SamplingConfig
        from leakaudit.signals.stages import sample_fresh, score_fixed, score_fresh

        plan, records = self.plan(), self.records()
        views = target_views(plan)
        pending = [v for v in views if not is_done(self.run.fresh(v.target))]
        # 1) fresh trajectories from each target (student prompt only)
        for v in tqdm(pending, desc="sample", disable=not self.progress):
            sampling = dict(self.cfg.signals.sampling)
            sampling.setdefault("seed", stage_seed(self.cfg.seed, "sample", v.target))
            cands = [records[r] for r in plan.candidates[v.domain]]
            with self._backend(v.target) as backend:
                sample_fresh(backend, self.tokenizer, cands, SamplingConfig(**sampling), self.run.fresh(v.target))
        # 2) every model scores, once loaded: fixed texts of its domain(s) and the trajectories that need it
        k = self.cfg.plan.k_refs
        scorers = {v.target: fresh_scorers(plan, v, k) for v in pending}
        needs: dict[str, list[tuple[str, list[str] | None]]] = {}
        for v in pending:
            for m, record_ids in scorers[v.target].items():
                needs.setdefault(m, []).append((v.target, record_ids))
        all_models = [BASE_ID, *plan.models]
        for m in tqdm(all_models, desc="score", disable=not self.progress):
            fixed_missing = not self.run.fixed(m).is_file()
            if not fixed_missing and not needs.get(m):
                continue
            with self._backend(m) as backend:
                if fixed_missing:
                    domains = sorted(plan.candidates) if m == BASE_ID else [plan.models[m]["domain"]]
                    recs = [records[r] for d in domains for r in plan.candidates[d] + plan.population[d]]
                    score_fixed(backend, self.tokenizer, recs, self.run.fixed(m), vocab_stats=True)
                for target, record_ids in needs.get(m, []):
                    score_fresh(backend, m, self.run.fresh(target), record_ids=record_ids)
        for v in pending:
            mark_done(self.run.fresh(v.target), {"scored_by": scorers[v.target]})

    def _backend(self, model_id: str):
        from leakaudit.signals.backend import open_backend

        return open_backend(self.cfg.signals.backend, self.model_ref(model_id),
                            score_batch_size=self.cfg.signals.score_batch_size,
                            autocast_bf16=self.cfg.signals.autocast_bf16)

    def stage_attacks(self) -> None:
        if self.run.scores.is_file():
            return
        from leakaudit.scoring import score_targets

        plan, records = self.plan(), self.records()
        scores, leak_map = score_targets(self.run, plan, records, self.cfg, self.tokenizer, progress=self.progress)
        with atomic_path(self.run.scores) as tmp:
            scores.to_parquet(tmp, index=False)
        if leak_map is not None:
            write_json(self.run.leak_map, leak_map)

    def stage_report(self) -> None:
        if self.run.report_html.is_file():
            return
        from leakaudit.report import build_report

        build_report(self.run.root, n_boot=self.cfg.metrics.n_boot, seed=self.cfg.metrics.seed)
