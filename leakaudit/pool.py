"""Join finished single-domain runs of one study (shards, `run-study --domain`) into one pooled run (`leakaudit pool`).

A study whose domains do not fit one machine's session is run one domain at a time: `run-study --preset cpu-full
--domain code`, `... --domain math`, ... Each shard is an ordinary run directory. `pool_runs` checks that the
shards are one study (every config key equal but the run's name, where it is written, how its jobs ran and its
domains; no domain in two shards), then writes a run directory that holds their scores side by side and builds the
ordinary report on it: per-domain rows as in each shard, and the pooled rows ("all" domains) over every target,
including the published statistics (mean per-target AUROC, strongest baseline per target) over all of them.

Layout of a pooled run: scores.parquet (the shards' rows, in shard order), study.yaml (the shared recipe with the
union of the domains), records.jsonl (when every shard kept one: for the blind text null), realism.json,
teacher_literalness.json and sample_literalness.json (the shards' per-domain / per-target entries side by side),
pool.json (which shards, with the sha256 of each one's scores, its teacher and its env.json: shards may have run on
different machines, so the pool has no env.json of its own), then metrics.*, blind_text_null.csv, plots/ and
report.html. Nothing is trained or scored: everything is read from the shards. Every check runs before the first
file is written; a pooled directory is rewritten only from the same shards (pool.json), never from others. While it
reads and writes, the pool holds the run lock of every shard and of the pooled directory (leakaudit.locks): a shard
that a study is still running, or a pooled directory another `leakaudit pool` is writing, is refused with exit 2.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import yaml

from leakaudit.errors import InputError
from leakaudit.io import atomic_path, read_json, write_json, write_text
from leakaudit.locks import run_exclusively
from leakaudit.report.load import read_scores
from leakaudit.rundir import RunDir
from leakaudit.yamlio import read_yaml

POOL_FILE = "pool.json"
SHARD_FREE_KEYS = ("name", "out_root", "execution")
"""Top-level config keys shards may differ in besides data.domains: the run's name, where it is written and how its
jobs ran (none of them changes a result; StudyConfig.hash leaves out the last two as well)."""


def shard_recipe(config_path: Path) -> tuple[dict[str, Any], list[str], int]:
    """(the resolved config without name, out_root, execution and data.domains, the shard's domains, its seed) of a
    run's study.yaml. Every key is spelled out (keys a run predates read as their defaults), so a difference
    names both values."""
    from leakaudit.config import load_config

    cfg = load_config(config_path)
    d = cfg.to_dict()
    for k in SHARD_FREE_KEYS:
        d.pop(k, None)
    d["data"].pop("domains")
    return d, list(cfg.data.domains), cfg.seed


def first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    """The first dotted key (sorted order) at which two plain-data trees differ, or None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            where = f"{prefix}.{k}" if prefix else str(k)
            if k not in a or k not in b:
                return where
            diff = first_difference(a[k], b[k], where)
            if diff:
                return diff
        return None
    return None if a == b else (prefix or "(top level)")


def _lookup(d: dict, dotted: str) -> Any:
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            return "(absent)"
        d = d[k]
    return d


def check_shards(runs: Sequence[Path]) -> list[dict]:
    """Validate the shards (InputError naming the run directory and the field); return one entry per shard:
    path, domains, seed, recipe. Reads study.yaml and the columns of scores.parquet only."""
    if len(runs) < 2:
        raise InputError(f"give at least two run directories to pool (got {len(runs)})")
    shards: list[dict] = []
    seen_domain: dict[str, Path] = {}
    for path in runs:
        rd = RunDir(Path(path))
        if not rd.root.is_dir():
            raise InputError("not a run directory", path=str(rd.root))
        for needed, what in ((rd.config, "study.yaml"), (rd.scores, "scores.parquet (run its attacks stage)")):
            if not needed.is_file():
                raise InputError(f"has no {what}", path=str(rd.root))
        recipe, domains, seed = shard_recipe(rd.config)
        scores = read_scores(rd.scores, columns=["domain"])
        extra = sorted(set(scores["domain"]) - set(domains))
        if extra:
            raise InputError(f"scores rows of domains {extra} that study.yaml's data.domains does not list",
                             path=str(rd.scores), field="domain")
        for d in domains:
            if d in seen_domain:
                raise InputError(f"domain '{d}' is also in {seen_domain[d]}: a pool takes each domain from one "
                                 "shard", path=str(rd.config), field="data.domains")
            seen_domain[d] = rd.root
        if shards:
            first = shards[0]
            diff = first_difference(first["recipe"], recipe)
            if diff:
                raise InputError(f"is not a shard of the same study as {first['path']}: {diff} is "
                                 f"{_lookup(recipe, diff)!r} here and {_lookup(first['recipe'], diff)!r} there",
                                 path=str(rd.config), field=diff)
        shards.append({"path": rd.root, "domains": domains, "seed": seed, "recipe": recipe})
    return shards


def _pool_record(shards: list[dict]) -> dict:
    """pool.json: each shard's path, domains, config hash and the sha256 of its scores (what the pool was made of)."""
    from leakaudit.report.provenance import file_sha256, run_config_hash
    from leakaudit.report.teacher import teacher_info

    rows = []
    for s in shards:
        rd = RunDir(s["path"])
        config = read_yaml(rd.config) or {}
        rows.append({"path": str(rd.root), "name": config.get("name"), "domains": s["domains"], "seed": s["seed"],
                     "config_hash": run_config_hash(config), "scores_sha256": file_sha256(rd.scores),
                     "teacher": teacher_info(rd.root, config), "env": _read_optional(rd.env)})
    return {"shards": rows,
            "teachers": "one per shard: each shard prepared its teacher on its own domains' never-candidate records"}


def _same_inputs(out: RunDir, record: dict) -> bool:
    """Whether `out` holds a pool of exactly these shards (same paths and scores) or nothing at all."""
    pool = out.root / POOL_FILE
    if not out.root.exists() or not any(not p.name.startswith(".") for p in out.root.iterdir()):
        return True  # nothing there but hidden files (the run lock a refused pool leaves)
    if not pool.is_file():
        return False
    old = read_json(pool).get("shards") or []
    key = lambda rows: [(r.get("path"), r.get("scores_sha256")) for r in rows]  # noqa: E731
    return key(old) == key(record["shards"])


def merged_config(shards: list[dict], out: Path) -> dict:
    """The first shard's study.yaml with every shard's domains, named after the pooled directory."""
    config = read_yaml(RunDir(shards[0]["path"]).config) or {}
    config.pop("_meta", None)
    domains: dict = {}
    for s in shards:
        c = read_yaml(RunDir(s["path"]).config) or {}
        domains.update(c["data"]["domains"])
    config["data"]["domains"] = domains
    config["name"], config["out_root"] = out.name, str(out.parent)
    return config


def merge_realism(cards: list[dict | None]) -> dict | None:
    """The shards' realism cards side by side: targets concatenated, per-domain summaries joined (each domain
    comes from one shard). None when a shard has no card."""
    if any(c is None for c in cards):
        return None
    out = {k: v for k, v in cards[0].items() if k not in ("targets", "domains", "measured", "reason")}
    out["targets"] = [t for c in cards for t in c.get("targets", [])]
    out["domains"] = {d: v for c in cards for d, v in (c.get("domains") or {}).items()}
    out["measured"] = all(c.get("measured") for c in cards)
    out["reason"] = "; ".join(str(c["reason"]) for c in cards if c.get("reason")) or None
    return out


def merge_teacher_literalness(parts: list[dict | None]) -> dict | None:
    """Per-domain teacher measurements side by side (one teacher per shard, each measured on its own domain)."""
    if any(p is None for p in parts):
        return None
    out = {k: v for k, v in parts[0].items() if k not in ("domains", "per_record", "sft")}
    out["domains"] = {d: v for p in parts for d, v in (p.get("domains") or {}).items()}
    out["per_record"] = {r: v for p in parts for r, v in (p.get("per_record") or {}).items()}
    out["sft"] = None  # per shard: pool.json's shards[].teacher
    return out


def merge_sample_literalness(parts: list[dict | None]) -> dict | None:
    """Per-target sample similarity side by side, pooled again over every real target."""
    from leakaudit.literalness import _group_summary

    if any(p is None for p in parts):
        return None
    rows = [r for p in parts for r in p.get("per_record", [])]
    targets = {t: v for p in parts for t, v in (p.get("targets") or {}).items()}
    real = [r for r in rows if not r["null_check"]]
    return {**{k: v for k, v in parts[0].items() if k not in ("targets", "per_record", "pooled_real_targets")},
            "targets": targets,
            "pooled_real_targets": {"n_targets": sum(not t["null_check"] for t in targets.values()),
                                    **_group_summary(real)},
            "per_record": rows}


def _read_optional(path: Path) -> dict | None:
    return read_json(path) if path.is_file() else None


def pool_runs(out: Path, runs: Sequence[Path], *, n_boot: int = 1000, seed: int = 0, n_perm: int = 200) -> Path:
    """Check the shards, write the pooled run directory `out` and its report; return report.html's path."""
    out_rd = RunDir(Path(out))
    runs = [Path(r) for r in runs]
    if any(out_rd.root.resolve() == r.resolve() for r in runs):
        raise InputError("the pooled directory must not be one of the shards", path=str(out_rd.root))
    shards = check_shards(runs)
    with ExitStack() as locks:
        # the shards' locks first (no study may rewrite a shard's scores between the digest below and the read), so
        # that a shard still running leaves no pooled directory behind (run_exclusively creates the directory)
        for s in shards:
            locks.enter_context(run_exclusively(s["path"], writes=False))
        record = _pool_record(shards)
        if not _same_inputs(out_rd, record):
            raise InputError(f"holds something other than a pool of these shards (no {POOL_FILE}, or one of other "
                             "shards or scores): choose another directory", path=str(out_rd.root))
        locks.enter_context(run_exclusively(out_rd.root))
        return _write_pool(out_rd, shards, record, n_boot=n_boot, seed=seed, n_perm=n_perm)


def _write_pool(out_rd: RunDir, shards: list[dict], record: dict, *, n_boot: int, seed: int, n_perm: int) -> Path:
    """Read the checked shards, write the pooled directory and build its report (the caller holds the locks)."""
    from leakaudit.data.records import read_jsonl, write_jsonl
    from leakaudit.realism import realism_card
    from leakaudit.report import build_report
    from leakaudit.report.build import design_check
    from leakaudit.report.health import training_health

    rds = [RunDir(s["path"]) for s in shards]
    # everything is read (and checked) before the first file is written
    scores = pd.concat([read_scores(rd.scores) for rd in rds], ignore_index=True)
    records = [read_jsonl(rd.records) for rd in rds] if all(rd.records.is_file() for rd in rds) else None
    config = merged_config(shards, out_rd.root)
    realism = merge_realism([_read_optional(rd.realism) or (realism_card(rd.root) if rd.membership.is_file()
                                                            else None) for rd in rds])
    teacher_lit = merge_teacher_literalness([_read_optional(rd.teacher_literalness) for rd in rds])
    sample_lit = merge_sample_literalness([_read_optional(rd.sample_literalness) for rd in rds])
    balance = [row for rd in rds
               for row in design_check(rd, read_yaml(rd.config) or {})]
    health = [row for rd in rds for row in training_health(rd.root / "models")]

    out_rd.root.mkdir(parents=True, exist_ok=True)
    write_json(out_rd.root / POOL_FILE, record)
    write_text(out_rd.config, yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    with atomic_path(out_rd.scores) as tmp:
        scores.to_parquet(tmp, index=False)
    if records is not None:
        write_jsonl([r for rs in records for r in rs], out_rd.records)
    for path, obj in ((out_rd.teacher_literalness, teacher_lit), (out_rd.sample_literalness, sample_lit)):
        if obj is not None:
            write_json(path, obj)
    return build_report(out_rd.root, n_boot=n_boot, seed=seed, n_perm=n_perm, realism=realism, balance=balance,
                        health=health)
