"""The signal stages the pipeline calls; each returns at once when its output is already stored (resume).

- sample_fresh: n trajectories per record from the target, prompted with the student prompt only.
- score_fresh: per-token log-probs of the stored trajectories under one model (prefix = the stored prompt);
  score_fresh_all: the same for several targets' directories at once (each record's prompt shared across them).
- score_fixed: per-token log-probs (+ Min-K%++ statistics) of each record's reference text under one model.
The fresh directory's DONE marker is the pipeline's to write once every needed model has scored
(`missing_logp` says which have not).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Collection, Sequence

from leakaudit.data.records import Record, check_unique
from leakaudit.errors import ConfigError
from leakaudit.prompting import reference_text_ids, student_prompt_ids
from leakaudit.signals.types import Backend, SamplingConfig
from leakaudit.signals.store import (has_logp, has_trajectories, load_prompts, load_sampling_meta,
                                     load_trajectories, save_fixed, save_logp, save_trajectories)


def already_sampled(out_dir: Path, cfg: SamplingConfig, record_ids: list[str], *, ids_key: str = "record_ids") -> bool:
    """True when out_dir holds trajectories sampled with `cfg` for `record_ids` (meta[ids_key]); False when it holds
    none. Trajectories of another config or other records raise: a run never reuses work done for other inputs."""
    if not has_trajectories(out_dir):
        return False
    meta = load_sampling_meta(out_dir)
    if meta.get("config") != cfg.to_dict() or meta.get(ids_key) != record_ids:
        raise ConfigError(f"{out_dir} holds trajectories sampled with another config or other records; "
                          f"delete it to resample")
    return True


def sample_fresh(backend: Backend, tokenizer: Any, records: Sequence[Record], cfg: SamplingConfig,
                 out_dir: str | os.PathLike, *, model_ref: str = "") -> int:
    """Sample cfg.n_per_record trajectories per record into out_dir. Returns the number of trajectories
    sampled (0 when out_dir already holds trajectories sampled with the same config and records)."""
    check_unique(records)
    out_dir = Path(out_dir)
    ids = [r.record_id for r in records]
    if already_sampled(out_dir, cfg, ids):
        return 0
    start = time.time()
    prompts = [student_prompt_ids(tokenizer, r) for r in records]
    trajs = backend.sample(prompts, cfg)
    meta = {"config": cfg.to_dict(), "model_ref": model_ref or getattr(backend, "model_ref", ""),
            "record_ids": ids, "seconds": round(time.time() - start, 3),
            "n_tokens": sum(len(t) for per in trajs for t in per)}
    save_trajectories(out_dir, ids, trajs, meta, prompts=prompts)
    return sum(len(per) for per in trajs)


def score_fresh(backend: Backend, model_id: str, out_dir: str | os.PathLike, *,
                record_ids: Collection[str] | None = None) -> int:
    """Score the stored trajectories under `backend` as model `model_id` (prefix = the stored student prompt):
    all of them, or only those of `record_ids` (the rest are stored as NaN). Returns the number of tokens
    scored (0 when logp__<model_id>.npz already exists)."""
    return score_fresh_all(backend, model_id, [(out_dir, record_ids)])


def score_fresh_all(backend: Backend, model_id: str,
                    todo: Sequence[tuple[str | os.PathLike, Collection[str] | None]]) -> int:
    """score_fresh for several fresh directories (one per target) in one call to backend.score, so a record's prompt,
    the same in every target's directory, runs once per batch of its trajectories rather than once per target
    (with share_prefix: the base and every reference score each candidate's trajectories from 6-8 targets).

    todo: [(fresh directory, record ids or None = all)]. Every directory is scored when any lacks
    logp__<model_id>.npz, and only the missing files are written: the batches, hence every float, depend only on
    `todo`, so a rerun after a kill between two files writes what the uninterrupted run would have. Returns the
    number of tokens scored (0 when every file exists)."""
    if all(has_logp(d, model_id) for d, _ in todo):
        return 0
    keys, prefixes, conts = [], [], []
    for j, (out_dir, record_ids) in enumerate(todo):
        trajs = load_trajectories(out_dir)
        prompts = load_prompts(out_dir)
        if record_ids is not None:
            unknown = set(record_ids) - set(trajs)
            if unknown:
                raise ValueError(f"no trajectories stored for records {sorted(unknown)[:3]} in {out_dir}")
            trajs = {rid: rows for rid, rows in trajs.items() if rid in set(record_ids)}
        for rid, rows in trajs.items():
            for row in rows:
                keys.append((j, rid))
                prefixes.append(prompts[rid].tolist())
                conts.append(row.tolist())
    scores = backend.score(prefixes, conts) if conts else []
    logp: list[dict[str, list]] = [{} for _ in todo]
    for (j, rid), s in zip(keys, scores):
        logp[j].setdefault(rid, []).append(s.logp)
    for (out_dir, _), per_record in zip(todo, logp):
        if not has_logp(out_dir, model_id):
            save_logp(out_dir, model_id, per_record)
    return sum(len(c) for c in conts)


def missing_logp(out_dir: str | os.PathLike, model_ids: Sequence[str]) -> list[str]:
    """The model ids whose log-probs of the stored trajectories are not stored yet."""
    return [m for m in model_ids if not has_logp(out_dir, m)]


def score_fixed(backend: Backend, tokenizer: Any, records: Sequence[Record], out_path: str | os.PathLike, *,
                vocab_stats: bool = True) -> int:
    """Score each record's reference text (prefix = student prompt, continuation = reference_text_ids) into
    out_path. Returns the number of tokens scored (0 when out_path exists)."""
    check_unique(records)
    if Path(out_path).is_file():
        return 0
    prefixes = [student_prompt_ids(tokenizer, r) for r in records]
    conts = [reference_text_ids(tokenizer, r) for r in records]
    scores = backend.score(prefixes, conts, vocab_stats=vocab_stats)
    save_fixed(out_path, [r.record_id for r in records], conts, scores)
    return sum(len(c) for c in conts)
