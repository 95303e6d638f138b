"""Produces results/'s copies of the runs behind docs/results.md's prospective tables and the README's verdict: copies
each finished protocol run's small files and protocol_choices.json from the out-root that experiments/protocol_runs.py
writes to, and adds a results/index.md row for each run new to it, naming the tables it feeds. Then
`python experiments/results_tables.py` fills those tables.

    python experiments/land_runs.py --from DIR [--results results/] [--dry-run]

A run is finished when DIR/results/<name>/ holds scores.parquet; only the files results/ keeps are copied
(protocol_runs.SMALL_FILES). A run already in results/ is copied again only when a file differs, and its index row,
which may have been written by hand, is left alone. Bad input (DIR without results/, a folder whose name is not one of
the protocol's runs) exits 2 before anything is written.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import sys
from pathlib import Path

import protocol_runs  # siblings: experiments/ is on the path of a script run from it
from leakaudit.errors import InputError

RESULTS = Path(__file__).resolve().parents[1] / "results"
FEEDS = "protocol-test, readme-verdict"  # the tables a test seed, or the run that chooses its comparator, feeds


def finished_runs(src: Path) -> list[Path]:
    """DIR/results/<name>/ folders holding scores.parquet, sorted by name; InputError for a missing DIR/results or a
    finished folder that is not one of the protocol's runs."""
    kept = src / "results"
    if not kept.is_dir():
        raise InputError("no results/ folder: give the --out-root that protocol_runs.py wrote to", path=str(src))
    names = protocol_runs.protocol_names()
    runs = sorted(d for d in kept.iterdir() if (d / "scores.parquet").is_file())
    for d in runs:
        if d.name not in names:
            raise InputError("not a run of the protocol (experiments/protocol_runs.py names its runs)", path=str(d))
    return runs


def index_row(name: str, choices: dict) -> str:
    """results/index.md's row for a protocol run: domain, design, seed and the tables it feeds (every development run
    protocol-dev; a test seed of the chosen option, and the run that chooses its comparator, the decision's tables)."""
    domain, label, seed = protocol_runs.protocol_names()[name]
    chosen = choices.get(domain, {}).get("chosen")
    if seed == protocol_runs.DEV_SEED:
        chooses = chosen is not None and name in protocol_runs.comparator_dev_runs(domain, chosen)
        role = "development seed" + (", which chooses the comparator of the test seeds" if chooses else "")
        feeds = "protocol-dev" + (f", {FEEDS}" if chooses else "")
    else:
        role, feeds = "test seed", FEEDS if label == chosen else ""
    design = f"the protocol's design, {protocol_runs.DESCRIBED[label]}: {role}"
    return f"| `{name}` | {domain} | {design} | {seed} | {feeds} | |"


def changed_files(run: Path, dest: Path) -> list[str]:
    """The run's kept files that are missing from dest or differ from it."""
    return [f for f in protocol_runs.SMALL_FILES if (run / f).is_file()
            and not ((dest / f).is_file() and filecmp.cmp(run / f, dest / f, shallow=False))]


def land(src: Path, results: Path = RESULTS, *, dry: bool = False) -> list[str]:
    """Copy every finished run's changed files and protocol_choices.json into `results`, append index rows for runs
    new to results/index.md; the names of the runs copied."""
    runs = finished_runs(src)  # every check before the first write
    choices_file = src / "protocol_choices.json"
    choices = json.loads(choices_file.read_text(encoding="utf-8")) if choices_file.is_file() else {}
    index = results / "index.md"
    lines = index.read_text(encoding="utf-8").splitlines()
    listed = {line.split("|")[1].strip().strip("`") for line in lines if line.startswith("| `")}
    copied, rows = [], []
    for run in runs:
        files = changed_files(run, results / run.name)
        if files:
            copied.append(run.name)
            print(f"[land] {run.name}: {', '.join(files)}")
        if run.name not in listed:
            rows.append(index_row(run.name, choices))
        if files and not dry:
            (results / run.name).mkdir(exist_ok=True)
            for f in files:
                shutil.copy2(run / f, results / run.name / f)
    if choices_file.is_file() and not (dry or ((results / choices_file.name).is_file()
                                               and filecmp.cmp(choices_file, results / choices_file.name, False))):
        shutil.copy2(choices_file, results / choices_file.name)
    if rows:
        print("[land] index rows:\n" + "\n".join(rows))
        if not dry:
            last = max(i for i, line in enumerate(lines) if line.startswith("| `"))
            index.write_text("\n".join(lines[:last + 1] + rows + lines[last + 1:]) + "\n", encoding="utf-8")
    return copied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="src", type=Path, required=True, help="protocol_runs.py's --out-root")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the runs are kept (default: results/)")
    ap.add_argument("--dry-run", action="store_true", help="say what would be copied, copy nothing")
    args = ap.parse_args()
    try:
        copied = land(args.src, args.results, dry=args.dry_run)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)  # the project's code for bad input; nothing has been written
    print(f"[land] {len(copied)} run(s) {'would be ' if args.dry_run else ''}copied"
          + ("; now run python experiments/results_tables.py" if copied and not args.dry_run else ""))


if __name__ == "__main__":
    main()
