"""Produces the runs behind docs/results.md's prospective tables: the protocol of docs/protocol.md, per domain the
development seed, the rule that fixes the domain's open setting, then the test seeds with that setting, one run at a
time on the design of experiments/protocol/design.yaml.

    python experiments/protocol_runs.py --out-root DIR [--domains medical code math] [--dry-run]

The rules are the protocol's, in code, so nothing is chosen by hand after a development run:
- medical, passes: 8 unless fewer than 7 of the 9 students (8 targets + the null student) end closer to their teacher
  than they started (metrics.json `training_health`); then 3.
- code, teacher: of the teachers that answer from their context in another surface form (`restated`: the body with
  its locals renamed; `plan`: the body told as numbered English steps), the least literal one (lowest log p per token
  of the canonical body under the teacher with its context, teacher stage), provided at least 7 of 9 students move
  toward it; else the next; else the copying teacher of the stored development seeds.
- math, answer window: options in order of cost (the restated teacher, answer first, at 48 tokens; the copying
  teacher at 128; at 192); the first whose held-out final-answer match of fresh samples (metrics.json `realism`,
  mean over the targets) is at least 0.10; if none, the one with the highest match.

Each choice is written to DIR/protocol_choices.json (with the date, the rule's evidence and the development runs)
before the domain's first test seed starts, and is never revisited. Runs resume where they stopped (`leakaudit
run-study` skips finished stages and models); rerunning this script after a crash goes on where it was. When a run
ends or stops after a stage, its small files (study.yaml, scores.parquet, metrics.json, stage_times.log,
teacher_literalness.json: whichever exist) are copied to DIR/results/<name>/,
the form results/ keeps them in.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

DESIGN = Path(__file__).resolve().parent / "protocol" / "design.yaml"
SOURCES = {"math": "champ", "medical": "medical", "code": "humaneval"}
DEV_SEED, TEST_SEEDS = 8, (6, 7)
MOVED_NEEDED, HELD_OUT_MATCH_NEEDED = 7, 0.10
SMALL_FILES = ("study.yaml", "scores.parquet", "metrics.json", "stage_times.log", "teacher_literalness.json")

DOMAIN_OVERRIDES = {
    # human-eval has 163 records within the token budget: 48 candidates + 24 population + 32 background + 24
    # reference-only leave 35, so the teacher prepares on 32 teacher-only records (with the population: 56)
    "code": ["data.n_teacher_records=32"],
}
OPTIONS = {
    "medical": [("passes8", []), ("passes3", ["training.epochs=3"])],
    "code": [("restated", ["teacher.kind=restated"]), ("plan", ["teacher.kind=plan"]), ("prepared", [])],
    "math": [("restated48", ["teacher.kind=restated"]),
             ("prepared128", ["training.max_new_tokens=128", "signals.sampling.max_new_tokens=128"]),
             ("prepared192", ["training.max_new_tokens=192", "signals.sampling.max_new_tokens=192"])],
}
DESCRIBED = {
    # each option as the results tables name it
    "passes8": "8 passes", "passes3": "3 passes",
    "restated": "restated teacher (locals renamed)", "plan": "plan teacher (the program as numbered English steps)",
    "prepared": "copying teacher",
    "restated48": "restated teacher (answer first), 48 tokens", "prepared128": "copying teacher, 128 tokens",
    "prepared192": "copying teacher, 192 tokens",
}
STORED_DEV_RUNS = {
    # each domain's development seeds stored before this design (docs/protocol.md, "Per domain"), with their label
    "code": ("the copying teacher's seeds 1, 2", ["regime_code_prepared_e8_seed1", "regime_code_prepared_e8_seed2"]),
    "medical": ("seed 0 (3 passes)", ["regime_medical_prepared_offline4_seed0"]),
    "math": ("seeds 1–5 (24 candidates, 48 tokens)",
             [f"regime_math_prepared_e8_offline8_seed{s}" for s in range(1, 6)]),
}
EXISTING_NAMES = {
    # the medical development run was started (same design, same config) before this script existed
    ("medical", "passes8", DEV_SEED): "dev-medical-prepared-e8-offline8-c48-seed8",
}


def run_name(domain: str, label: str, seed: int) -> str:
    phase = "dev" if seed == DEV_SEED else "test"
    return EXISTING_NAMES.get((domain, label, seed), f"protocol-{phase}-{domain}-{label}-seed{seed}")


def protocol_names() -> dict[str, tuple[str, str, int]]:
    """Every run name the protocol can produce -> (domain, option, seed)."""
    return {run_name(d, label, s): (d, label, s) for d, options in OPTIONS.items() for label, _ in options
            for s in (DEV_SEED, *TEST_SEEDS)}


def comparator_dev_runs(domain: str, chosen: str) -> list[str]:
    """The development runs whose scores choose the comparator of a domain's test seeds (amendment 4: the development
    runs of the regime the test seeds run in).
    - medical: its seed 8 run, which its rule runs at 8 passes only, so also when the rule falls back to 3 passes;
    - code with the copying teacher (the rule's fallback): the stored copying-teacher seeds 1, 2;
    - otherwise the chosen option's seed 8 run (code: the teacher chosen; math: the answer window chosen)."""
    if domain == "medical":
        return [run_name("medical", "passes8", DEV_SEED)]
    if domain == "code" and chosen == "prepared":
        return STORED_DEV_RUNS["code"][1]
    return [run_name(domain, chosen, DEV_SEED)]


def overrides(domain: str, label: str, seed: int, out_root: Path) -> list[str]:
    """Every --set of one run: the domain, its seed, its name, the domain's and the option's settings."""
    option = dict(OPTIONS[domain])[label]
    return [f"data.domains={{{domain}: {{source: {SOURCES[domain]}}}}}", f"seed={seed}",
            f"name={run_name(domain, label, seed)}", f"out_root={out_root}", *DOMAIN_OVERRIDES.get(domain, []),
            *option]


_CHILD = """
import json, sys
from leakaudit.config import load_config
from leakaudit.study import Study
args = json.loads(sys.argv[1])
Study(load_config(args["design"], overrides=args["sets"]), progress=None).run_all(until=args["until"])
"""


def run(domain: str, label: str, seed: int, out_root: Path, *, until: str | None = None, dry: bool = False) -> Path:
    """Run (or resume) one run up to `until` (None: to the end) in a child process; its directory."""
    sets = overrides(domain, label, seed, out_root)
    root = out_root / run_name(domain, label, seed)
    print(f"[protocol] {root.name}{f' (until {until})' if until else ''}: --set " + " --set ".join(sets), flush=True)
    if not dry:
        payload = json.dumps({"design": str(DESIGN), "sets": sets, "until": until})
        subprocess.run([sys.executable, "-c", _CHILD, payload], check=True)
        # what the run has so far (a run stopped after its teacher stage: study.yaml and teacher_literalness.json,
        # the evidence of code's rule), refreshed when the run goes on to its end
        keep = out_root / "results" / root.name
        keep.mkdir(parents=True, exist_ok=True)
        for name in SMALL_FILES:
            if (root / name).is_file():
                shutil.copy2(root / name, keep / name)
    return root


# ---- the rules' evidence, read from a finished run --------------------------------------------------------------
def students_moved(root: Path) -> tuple[int, int]:
    """(students that ended closer to their teacher than they started, students): the targets and the null student,
    not the offline references."""
    health = json.loads((root / "metrics.json").read_text())["training_health"]
    rows = [h for h in health if "-off" not in h["model_id"]]
    return sum(bool(h["moved_toward_teacher"]) for h in rows), len(rows)


def held_out_answer_match(root: Path) -> float:
    """Mean over the targets (null student excluded) of the fresh samples' held-out final-answer match."""
    rows = [r for r in json.loads((root / "metrics.json").read_text())["realism"]["rows"] if not r["null_check"]]
    values = [r["quality_held_out"] for r in rows if r.get("quality_held_out") is not None]
    return sum(values) / len(values) if values else 0.0


def teacher_log_p(root: Path, domain: str) -> float:
    """Mean log p per token of the privileged text under the teacher with its context (teacher stage): the higher,
    the more literally the teacher hands the privileged text over."""
    return json.loads((root / "teacher_literalness.json").read_text())["domains"][domain]["privileged_with_context"]


# ---- the rules ---------------------------------------------------------------------------------------------------
def choose_medical(out_root: Path, dry: bool) -> dict:
    root = run("medical", "passes8", DEV_SEED, out_root, dry=dry)
    if dry:
        return {"chosen": "passes8"}
    moved, n = students_moved(root)
    return {"chosen": "passes8" if moved >= MOVED_NEEDED else "passes3", "evidence": {"students_moved": [moved, n]},
            "dev_runs": [root.name]}


def choose_code(out_root: Path, dry: bool) -> dict:
    candidates = ["restated", "plan"]
    roots = {label: run("code", label, DEV_SEED, out_root, until="teacher", dry=dry) for label in candidates}
    if dry:
        return {"chosen": "plan"}
    literal = {label: teacher_log_p(root, "code") for label, root in roots.items()}
    evidence: dict = {"teacher_log_p_with_context": literal, "students_moved": {}}
    for label in sorted(candidates, key=literal.get):
        moved, n = students_moved(run("code", label, DEV_SEED, out_root))
        evidence["students_moved"][label] = [moved, n]
        if moved >= MOVED_NEEDED:
            return {"chosen": label, "evidence": evidence, "dev_runs": [roots[c].name for c in candidates]}
    return {"chosen": "prepared", "evidence": evidence, "dev_runs": [roots[c].name for c in candidates],
            "note": "no non-copying teacher moved 7 of 9 students: the copying teacher of the stored seeds"}


def choose_math(out_root: Path, dry: bool) -> dict:
    matches: dict[str, float] = {}
    for label, _ in OPTIONS["math"]:
        root = run("math", label, DEV_SEED, out_root, dry=dry)
        if dry:
            return {"chosen": label}
        matches[label] = held_out_answer_match(root)
        if matches[label] >= HELD_OUT_MATCH_NEEDED:
            break
    passing = [label for label, m in matches.items() if m >= HELD_OUT_MATCH_NEEDED]
    chosen = passing[0] if passing else max(matches, key=matches.get)
    return {"chosen": chosen, "evidence": {"held_out_answer_match": matches},
            "dev_runs": [run_name("math", label, DEV_SEED) for label in matches]}


RULES = {"medical": choose_medical, "code": choose_code, "math": choose_math}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-root", type=Path, required=True, help="where the run directories go")
    ap.add_argument("--domains", nargs="+", choices=list(RULES), default=["medical", "code", "math"])
    ap.add_argument("--dry-run", action="store_true", help="print the runs in order, run nothing")
    args = ap.parse_args()
    choices_file = args.out_root / "protocol_choices.json"
    choices = json.loads(choices_file.read_text()) if choices_file.is_file() else {}
    for domain in args.domains:
        if domain in choices:
            chosen = choices[domain]["chosen"]
        else:
            choice = RULES[domain](args.out_root, args.dry_run)
            chosen = choice["chosen"]
            if args.dry_run:  # the dry run's rules say which option they would reach first
                print(f"[protocol] {domain}: the rule picks among {[o for o, _ in OPTIONS[domain]]}; say {chosen}")
            else:
                choices[domain] = {**choice, "decided_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
                choices_file.write_text(json.dumps(choices, indent=1) + "\n")  # before any test seed of the domain
                print(f"[protocol] {domain}: {json.dumps(choices[domain])}", flush=True)
        for seed in TEST_SEEDS:
            run(domain, chosen, seed, args.out_root, dry=args.dry_run)


if __name__ == "__main__":
    main()
