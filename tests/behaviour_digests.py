"""Digests of the tiny study's and the tiny audit's outputs, to check that a refactor changes no result.

`tiny_digests(work, threads)` builds the tiny random Llama, runs the tiny study and a tiny audit (CLI, two trained
references) under `work` in a child process at `threads` torch threads, and returns the sha256 of each run's
scores.parquet and metrics.json. The recorded digests live in tests/golden/tiny_run_digests.json, one entry per
numeric platform (torch version, CPU capability, CPU model and bf16 ISA, threads): float results are only
byte-stable on one platform.
What is digested is what the code computed, not what a library stamps on the file: scores.parquet's schema and
values (not pandas' and pyarrow's version metadata), metrics.json less its dates, paths, versions and file hashes.

Record the current code's digests (before a refactor, on the machine that will check it):
    python tests/behaviour_digests.py --record
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "tiny_run_digests.json"
REPO = Path(__file__).resolve().parents[1]

# Run in a child so the thread count is set before torch starts, whatever the calling process did.
_CHILD = r"""
import json, shutil, sys
from pathlib import Path
import torch
torch.set_num_threads(int(sys.argv[2]))
from leakaudit.cli import main
from leakaudit.config import load_config
from leakaudit.data.sources import load_source
from leakaudit.models import make_tiny_llama
from leakaudit.study import Study

work = Path(sys.argv[1])
model = str(make_tiny_llama(work / "tiny0", seed=0))
cfg = load_config(preset="tiny", overrides=[f"base_model={model}", f"out_root={work / 'study'}", "name=e2e"])
Study(cfg, progress=False, log=lambda m: None).run_all()

recs = load_source("champ", limit=12, seed=1)
write = lambda p, rows: p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
write(work / "cands.jsonl", [{**r.to_dict(), "meta": {"is_member": i % 2 == 0}} for i, r in enumerate(recs[:6])])
write(work / "pop.jsonl", [r.to_dict() for r in recs[6:]])
shutil.copytree(model, work / "target")
code = main(["audit", "--target", str(work / "target"), "--candidates", str(work / "cands.jsonl"),
             "--population", str(work / "pop.jsonl"), "--base-model", model, "--out", str(work / "audit"),
             "--train-references", "2", "--set", "training.epochs=1", "--set", "training.max_new_tokens=4",
             "--set", "training.batch_size=3", "--set", "signals.sampling.n_per_record=2",
             "--set", "signals.sampling.max_new_tokens=4", "--set", "metrics.n_boot=20"])
sys.exit(code)
"""


def platform_key(threads: int) -> str:
    """What float results depend on here: torch's version, the CPU kernels torch picked, the CPU (its model and
    best bf16 ISA: oneDNN runs the bf16 matmuls on AMX tiles where amx_bf16 is present, and torch's capability
    string says 'AVX512' on both kinds of machine here) and the thread count."""
    import torch

    from leakaudit.envinfo import cpu_info, isa_level

    cpu = cpu_info()
    return (f"torch {torch.__version__} | {torch.backends.cpu.get_cpu_capability()} | "
            f"{cpu['model_name']} ({isa_level(cpu['flags'])}) | {threads} threads")


def _parquet_digest(path: Path) -> str:
    """sha256 of a parquet file's columns (names and Arrow types) and values, every float exactly (JSON writes a
    float's shortest round-trip repr). Not of its bytes: pandas and pyarrow write their own versions into the file
    (pandas' schema metadata, parquet's created_by), so a fresh install with pandas 3.1.2 for 3.1.1 changed the bytes
    of a table whose every value was the same."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    values = json.dumps(table.to_pylist(), sort_keys=True, default=str)
    text = table.schema.remove_metadata().to_string() + "\n" + values
    return hashlib.sha256(text.encode()).hexdigest()


UNSTABLE_KEYS = ("date", "config_hash", "git", "versions", "libraries", "inputs")
"""metrics.json keys that differ between two identical runs (see _metrics_digest)."""


def _metrics_digest(path: Path, work: Path) -> str:
    """sha256 of metrics.json less what differs between two identical runs: the date, the run's paths, the
    config hash (it covers the paths; `config/tiny` digests the hash of the tiny config at fixed paths instead) and
    the git commit the code ran at (env.json's `git`, copied into metrics.json: every commit changes it, so a digest
    that kept it held only on the commit it was recorded on) and the library versions (`versions`, `libraries`: a
    fresh install takes the newest release a pin allows, so a digest that kept them failed on a new peft with every
    score unchanged; torch, whose version moves the floats, is in the platform key) and the `inputs` it read (the
    sha256 of scores.parquet's bytes, which carry pandas' version; the digest checks that file's values itself)."""

    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in UNSTABLE_KEYS}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node.replace(str(work), "<work>") if isinstance(node, str) else node

    text = json.dumps(strip(json.loads(path.read_text())), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def tiny_config_hash() -> str:
    """The config hash of the tiny study and of a tiny audit's config at fixed paths (what resumes an old run)."""
    from leakaudit.config import load_config

    cfg = load_config(preset="tiny", overrides=["base_model=/golden/tiny0", "out_root=/golden/study", "name=e2e"])
    return cfg.hash()


def tiny_digests(work: Path, threads: int) -> dict[str, str]:
    """{"study/scores.parquet": sha256, ...} for the tiny study (run `e2e`) and the tiny audit, run under `work`."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", _CHILD, str(work), str(threads)], check=True, env=env, cwd=REPO)
    roots = {"study": work / "study" / "e2e", "audit": work / "audit"}
    digests = {f"{kind}/scores.parquet": _parquet_digest(root / "scores.parquet") for kind, root in roots.items()}
    digests.update({f"{kind}/metrics.json": _metrics_digest(root / "metrics.json", work) for kind, root in roots.items()})
    return {**digests, "config/tiny": tiny_config_hash()}


def recorded() -> dict[str, dict[str, str]]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


if __name__ == "__main__":
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="write this platform's digests into the golden file")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    table = recorded()
    for n in args.threads:
        with tempfile.TemporaryDirectory() as tmp:
            digests = tiny_digests(Path(tmp), n)
        print(platform_key(n), json.dumps(digests, indent=1))
        if args.record:
            table[platform_key(n)] = digests
    if args.record:
        GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
