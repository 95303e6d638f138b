"""Targets: the models a run attacks, as kinds of target rather than branches in the stages.

A `ModelTarget` is a model the run loads (a trained student, or an audit's given directory or hub id); an
`ApiTarget` is an OpenAI-compatible endpoint (leakaudit.signals.api_stage). Both answer the same questions: what
identifies their content in the stage inputs, what is checked before the first file and probed before the
references are trained, how they are opened, sampled and scored, which records they could not answer for, and
what audit.json says about them. A run's *given* targets (its design's `given_targets`: none for a study, the
target for an audit) travel to jobs as plain data (`to_args` / `target_from_args`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol, Sequence

from leakaudit.rundir import RunDir


class Target(Protocol):
    """What the stages ask of an attacked model. `model_id`: its id in the plan; `ref`: the model reference whose
    content digest is a stage input, or None (an endpoint: its URL and model name are in the config)."""

    model_id: str
    ref: str | None

    def check(self, cfg: Any) -> None:
        """Before the run's first file: ConfigError / InputError when it cannot be attacked as configured."""

    def probe(self, cfg: Any, tokenizer: Any) -> None:
        """Before any model is trained (the run reaches the signals stage): the target answers."""

    def open_backend(self, cfg: Any, run: RunDir, tokenizer: Callable[[], Any]) -> ContextManager[Any]:
        """The signals backend that samples and scores it, released when the block ends (`tokenizer`: the run's,
        loaded when called)."""

    def sample(self, backend: Any, tokenizer: Any, records: Sequence[Any], sampling: Any, out_dir: Path) -> None:
        """Its fresh trajectories of `records` into `out_dir` (nothing when they are stored already)."""

    def unanswered(self, run: RunDir) -> dict[str, str]:
        """{record id: why} for records whose trajectories could not be recovered (left out of every score)."""

    def summary(self, run: RunDir, scores: Any, specs: Sequence[Any], log: Callable[[str], None]) -> dict:
        """What audit.json records about it beside the verdict ({} when nothing)."""

    def to_args(self) -> dict[str, Any]:
        """Plain data for a job (target_from_args rebuilds it with the run's config)."""


def open_model_backend(cfg: Any, model_ref: str) -> ContextManager[Any]:
    """The signals backend (cfg.signals.backend, with the run's signal options) for one model reference."""
    from leakaudit.signals.backend import open_backend

    s = cfg.signals
    return open_backend(s.backend, model_ref, trust_remote_code=cfg.trust_remote_code,
                        score_batch_size=s.score_batch_size, autocast_bf16=s.autocast_bf16,
                        vllm_stats_topk=s.vllm_stats_topk, share_prefix=s.share_prefix,
                        share_prefill=s.share_prefill)


@dataclass(frozen=True)
class ModelTarget:
    """A model the run loads: a directory (trained here or given) or a hub id."""

    model_id: str
    ref: str

    def check(self, cfg: Any) -> None:
        """Nothing beyond the model-reference checks every model the run reads gets (safetensors, no code)."""

    def probe(self, cfg: Any, tokenizer: Any) -> None:
        """Nothing: loading it is the probe."""

    def open_backend(self, cfg: Any, run: RunDir, tokenizer: Callable[[], Any]) -> ContextManager[Any]:
        return open_model_backend(cfg, self.ref)

    def sample(self, backend: Any, tokenizer: Any, records: Sequence[Any], sampling: Any, out_dir: Path) -> None:
        from leakaudit.signals.stages import sample_fresh

        sample_fresh(backend, tokenizer, records, sampling, out_dir)

    def unanswered(self, run: RunDir) -> dict[str, str]:
        return {}

    def summary(self, run: RunDir, scores: Any, specs: Sequence[Any], log: Callable[[str], None]) -> dict:
        return {}

    def to_args(self) -> dict[str, Any]:
        return {"kind": "model", "model_id": self.model_id, "ref": self.ref}


@dataclass(frozen=True)
class ApiTarget:
    """An OpenAI-compatible endpoint (an audit's --target http(s)://HOST:PORT/v1): `audit` is the run's audit config
    section (URL, served model, key variable, concurrency, timeouts)."""

    model_id: str
    audit: Any
    ref: None = None

    def check(self, cfg: Any) -> None:
        from leakaudit.signals.api_stage import check_api_target

        check_api_target(self.audit, cfg.signals.sampling)

    def probe(self, cfg: Any, tokenizer: Any) -> None:
        """Reachable, key accepted, log-probs returned: before any reference is trained."""
        from leakaudit.signals.api_stage import probe_api_target

        probe_api_target(self.audit, tokenizer)

    def open_backend(self, cfg: Any, run: RunDir, tokenizer: Callable[[], Any]) -> ContextManager[Any]:
        from leakaudit.signals.api_stage import open_api_backend

        return open_api_backend(self.audit, tokenizer(), run.fresh(self.model_id))

    def sample(self, backend: Any, tokenizer: Any, records: Sequence[Any], sampling: Any, out_dir: Path) -> None:
        from leakaudit.signals.api_stage import sample_fresh_api

        sample_fresh_api(backend, tokenizer, records, sampling, out_dir)

    def unanswered(self, run: RunDir) -> dict[str, str]:
        from leakaudit.signals.api_stage import excluded_records

        return excluded_records(run.fresh(self.model_id))

    def summary(self, run: RunDir, scores: Any, specs: Sequence[Any], log: Callable[[str], None]) -> dict:
        """{"api": leakaudit.signals.api_stage.api_summary(...)} (which attacks ran, which records were excluded),
        logged in one line; {} before the target was sampled."""
        from leakaudit.signals.api_stage import api_summary

        ran = sorted(set(scores.loc[scores.target == self.model_id, "attack"]))
        summary = api_summary(run.fresh(self.model_id), specs, ran)
        if summary is None:
            return {}
        skipped = summary["attacks"]["skipped"]
        log(f"[attacks] API target: ran {summary['attacks']['run']}; skipped {sorted(skipped)}; "
            f"{summary['n_excluded']} of {summary['n_requested']} candidates excluded (token ids not recoverable)")
        return {"api": summary}

    def to_args(self) -> dict[str, Any]:
        return {"kind": "api", "model_id": self.model_id}


def given_target(model_id: str, reference: str, audit: Any) -> Target:
    """An audit's --target as a target: an endpoint (http(s)://...) or a model reference."""
    from leakaudit.signals.api_client import is_api_target

    return ApiTarget(model_id, audit) if is_api_target(reference) else ModelTarget(model_id, reference)


def target_from_args(args: dict[str, Any], cfg: Any) -> Target:
    """The target `to_args` described (an endpoint's settings are the run config's audit section)."""
    if args["kind"] == "api":
        return ApiTarget(args["model_id"], cfg.audit)
    return ModelTarget(args["model_id"], args["ref"])


def drop_unanswered(scores: Any, target: Target, run: RunDir) -> Any:
    """scores without the rows (every attack) of the records `target` could not answer for."""
    unanswered = target.unanswered(run)
    if not unanswered:
        return scores
    from leakaudit.signals.api_stage import drop_excluded

    return drop_excluded(scores, target.model_id, unanswered)
