"""Ragged signal storage (docs/contracts.md, "Signals"): flat npz arrays plus offsets, no pickle.

Fresh trajectories of one target, in `signals/fresh/<target>/`:
    trajectories.npz  record_id [S] str, traj_index [S] int32, offsets [S+1] int64, tokens [sum T] int32,
                      prompt_record_id [N] str, prompt_offsets [N+1] int64, prompt_tokens [sum P] int32
                      (the student prompt ids each record was sampled from, so scoring needs no tokenizer)
    sampling.json     the SamplingConfig, model ref and anything else the caller records
    logp__<model_id>.npz  logp [sum T] float32, aligned with `tokens`
Fixed reference texts, one file per scoring model (`signals/fixed/<model_id>.npz`):
    record_id [N] str, offsets [N+1] int64, tokens [sum T] int32, logp [sum T] float32, and, when scored with
    vocabulary statistics, mu and sigma [sum T] float32.
Every file is written atomically (temporary file + rename).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from leakaudit.errors import InputError
from leakaudit.io import atomic_path, read_json, write_json
from leakaudit.rundir import SAFE_NAME
from leakaudit.signals.types import TokenScores

TRAJECTORIES = "trajectories.npz"
SAMPLING = "sampling.json"


@dataclass(frozen=True)
class FixedScores:
    """One record's scored reference text: tokens int32 [T], logp float32 [T], mu/sigma float32 [T] or None."""

    tokens: np.ndarray
    logp: np.ndarray
    mu: np.ndarray | None
    sigma: np.ndarray | None


def _save_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def _load_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    if not Path(path).is_file():
        raise InputError("missing signals file", path=str(path))
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _pack(seqs: Sequence[Sequence[Any]], dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Ragged rows -> (offsets int64 [S+1], flat [sum T] of `dtype`)."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = (np.concatenate([np.asarray(s, dtype=dtype) for s in seqs]) if len(seqs)
            else np.zeros(0, dtype=dtype)).astype(dtype, copy=False)
    return offsets, flat


def _unpack(offsets: np.ndarray, flat: np.ndarray) -> list[np.ndarray]:
    return [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def _strings(values: Sequence[str]) -> np.ndarray:
    return np.asarray([str(v) for v in values], dtype=np.str_) if len(values) else np.zeros(0, dtype="<U1")


def check_model_id(model_id: str) -> str:
    """model ids become file names: letters, digits, '.', '_', '-' only, not starting with a separator."""
    if not isinstance(model_id, str) or not SAFE_NAME.match(model_id):
        raise InputError(f"model id {model_id!r} is not a safe file name (letters, digits, . _ -)")
    return model_id


def logp_path(directory: str | os.PathLike, model_id: str) -> Path:
    return Path(directory) / f"logp__{check_model_id(model_id)}.npz"


# ---------------------------------------------------------------- fresh trajectories
def save_trajectories(directory: str | os.PathLike, record_ids: Sequence[str], trajs: Sequence[Sequence[Sequence[int]]],
                      sampling_meta: Mapping[str, Any], *, prompts: Sequence[Sequence[int]] | None = None) -> None:
    """Store [N][n] completions (aligned with record_ids) and, optionally, the N prompts they came from.

    sampling.json is written first and trajectories.npz last, so the npz existing means both are complete.
    """
    if len(record_ids) != len(trajs):
        raise ValueError(f"{len(record_ids)} record ids but {len(trajs)} trajectory lists")
    if len(set(record_ids)) != len(record_ids):
        raise ValueError("record ids are not unique")
    if prompts is not None and len(prompts) != len(record_ids):
        raise ValueError(f"{len(record_ids)} record ids but {len(prompts)} prompts")
    rows, traj_index, seqs = [], [], []
    for rid, per_record in zip(record_ids, trajs):
        for j, seq in enumerate(per_record):
            rows.append(rid)
            traj_index.append(j)
            seqs.append(seq)
    offsets, tokens = _pack(seqs, np.int32)
    arrays = {"record_id": _strings(rows), "traj_index": np.asarray(traj_index, dtype=np.int32),
              "offsets": offsets, "tokens": tokens}
    if prompts is not None:
        p_offsets, p_tokens = _pack(prompts, np.int32)
        arrays.update(prompt_record_id=_strings(record_ids), prompt_offsets=p_offsets, prompt_tokens=p_tokens)
    directory = Path(directory)
    write_json(directory / SAMPLING, dict(sampling_meta))
    _save_npz(directory / TRAJECTORIES, arrays)


def has_trajectories(directory: str | os.PathLike) -> bool:
    return (Path(directory) / TRAJECTORIES).is_file()


def load_sampling_meta(directory: str | os.PathLike) -> dict[str, Any]:
    return read_json(Path(directory) / SAMPLING)


def _trajectory_rows(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    z = _load_npz(Path(directory) / TRAJECTORIES)
    if z["offsets"][-1] != len(z["tokens"]) or len(z["offsets"]) != len(z["record_id"]) + 1:
        raise InputError("inconsistent offsets", path=str(Path(directory) / TRAJECTORIES))
    return z


def _group(record_id: np.ndarray, traj_index: np.ndarray, rows: list[np.ndarray]) -> dict[str, list[np.ndarray]]:
    out: dict[str, list[tuple[int, np.ndarray]]] = {}
    for rid, j, row in zip(record_id.tolist(), traj_index.tolist(), rows):
        out.setdefault(rid, []).append((j, row))
    return {rid: [row for _, row in sorted(items, key=lambda x: x[0])] for rid, items in out.items()}


def load_trajectories(directory: str | os.PathLike) -> dict[str, list[np.ndarray]]:
    """record_id -> n int32 token arrays, ordered by trajectory index (record order as stored)."""
    z = _trajectory_rows(directory)
    return _group(z["record_id"], z["traj_index"], _unpack(z["offsets"], z["tokens"]))


def load_prompts(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """record_id -> int32 student prompt ids the trajectories were sampled from."""
    z = _trajectory_rows(directory)
    if "prompt_tokens" not in z:
        raise InputError("trajectories were stored without their prompts", path=str(Path(directory) / TRAJECTORIES))
    return dict(zip(z["prompt_record_id"].tolist(), _unpack(z["prompt_offsets"], z["prompt_tokens"])))


def save_logp(directory: str | os.PathLike, model_id: str, logp: Mapping[str, Sequence[np.ndarray]]) -> None:
    """Store per-token log-probs of the stored trajectories under `model_id`.

    logp: record_id -> n float arrays, same lengths as load_trajectories(directory). Records left out were not
    scored by this model (the pipeline scores a reference only on the records it is matched to); their
    entries are stored as NaN, so reading them by mistake cannot pass for a real log-prob.
    """
    z = _trajectory_rows(directory)
    flat = np.empty(len(z["tokens"]), dtype=np.float32)
    seen: dict[str, int] = {}
    for rid, j, a, b in zip(z["record_id"].tolist(), z["traj_index"].tolist(), z["offsets"][:-1], z["offsets"][1:]):
        if rid not in logp:
            flat[a:b] = np.nan
            continue
        rows = logp[rid]
        if j >= len(rows) or len(rows[j]) != b - a:
            raise ValueError(f"record {rid} trajectory {j}: expected {b - a} log-probs")
        flat[a:b] = np.asarray(rows[j], dtype=np.float32)
        seen[rid] = seen.get(rid, 0) + 1
    extra = set(logp) - set(seen)
    if extra:
        raise ValueError(f"log-probs for records without trajectories: {sorted(extra)[:3]}")
    _save_npz(logp_path(directory, model_id), {"logp": flat})


def has_logp(directory: str | os.PathLike, model_id: str) -> bool:
    return logp_path(directory, model_id).is_file()


def load_logp(directory: str | os.PathLike, model_id: str) -> dict[str, list[np.ndarray]]:
    """record_id -> n float32 arrays aligned with load_trajectories(directory)."""
    z = _trajectory_rows(directory)
    path = logp_path(directory, model_id)
    flat = _load_npz(path)["logp"]
    if len(flat) != len(z["tokens"]):
        raise InputError(f"{len(flat)} log-probs for {len(z['tokens'])} tokens", path=str(path))
    return _group(z["record_id"], z["traj_index"], _unpack(z["offsets"], flat))


# ---------------------------------------------------------------- fixed reference texts
def save_fixed(path: str | os.PathLike, record_ids: Sequence[str], tokens: Sequence[Sequence[int]],
               scores: Sequence[TokenScores]) -> None:
    """One model's scores of N reference texts; mu/sigma are stored when every TokenScores has them."""
    if not len(record_ids) == len(tokens) == len(scores):
        raise ValueError(f"{len(record_ids)} ids, {len(tokens)} token lists, {len(scores)} scores")
    if len(set(record_ids)) != len(record_ids):
        raise ValueError("record ids are not unique")
    for rid, t, s in zip(record_ids, tokens, scores):
        if len(t) != len(s.logp):
            raise ValueError(f"record {rid}: {len(t)} tokens but {len(s.logp)} log-probs")
    offsets, flat_tokens = _pack(tokens, np.int32)
    arrays = {"record_id": _strings(record_ids), "offsets": offsets, "tokens": flat_tokens,
              "logp": _pack([s.logp for s in scores], np.float32)[1]}
    if scores and all(s.mu is not None and s.sigma is not None for s in scores):
        arrays["mu"] = _pack([s.mu for s in scores], np.float32)[1]
        arrays["sigma"] = _pack([s.sigma for s in scores], np.float32)[1]
    _save_npz(path, arrays)


def load_fixed(path: str | os.PathLike) -> dict[str, FixedScores]:
    """record_id -> FixedScores, in stored order."""
    z = _load_npz(path)
    offsets = z["offsets"]
    if offsets[-1] != len(z["tokens"]) or len(z["logp"]) != len(z["tokens"]):
        raise InputError("inconsistent offsets", path=str(path))
    tok, lp = _unpack(offsets, z["tokens"]), _unpack(offsets, z["logp"])
    mu = _unpack(offsets, z["mu"]) if "mu" in z else [None] * len(tok)
    sigma = _unpack(offsets, z["sigma"]) if "sigma" in z else [None] * len(tok)
    return {rid: FixedScores(t, l, m, s) for rid, t, l, m, s in zip(z["record_id"].tolist(), tok, lp, mu, sigma)}
