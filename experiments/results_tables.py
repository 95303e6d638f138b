"""Produces the mean per-target AUROC tables of docs/results.md (headline, eight-passes, references, protocol-dev,
protocol-test) and README.md (readme-verdict, readme-code, readme-math, readme-medical) from the stored scores in
results/, and writes them between each table's `<!-- table:NAME -->` / `<!-- /table:NAME -->` markers. Nothing is
edited by hand: rerun after a new run lands.

    python experiments/results_tables.py            # rewrite the tables in place
    python experiments/results_tables.py --check    # exit 1 when a stored table differs from what the scores give

Each row reads one design's runs together (experiments/pool_runs.py's pooled_tables: targets of several seeds kept
apart, mean per-target AUROC with a two-level bootstrap, paired difference on the same resamples), with the bootstrap
settings the runs' reports used.

protocol-dev and protocol-test are built from what results/ holds (`protocol_dev_rows`, `protocol_test_rows`): the
development runs of the protocol's design, and the prospective test of docs/protocol.md, each finished test seed alone
and the finished seeds pooled, with the comparator chosen on the development run of the domain's chosen setting
(amendment 4), and the pooled reading with the comparator of the domain's stored development seeds beside it.
readme-verdict (`verdict_lines`) is the decision per domain, and the goal, from the same runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

import pool_runs  # siblings: experiments/ is on the path of a script run from it
import protocol_runs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


# table -> rows: (design label, domain, run folder names under results/)
MATH_OFF8 = [f"regime_math_prepared_e8_offline8_seed{s}" for s in (2, 3, 4, 5)]
ROWS = {
    "headline": [
        ("code, 3 passes, copying teacher (seeds 0, 1)", ["make_study_default_seed0",
                                                                       "regime_code_prepared_seed1"]),
        ("code, 8 passes, copying teacher (seeds 1, 2)", ["regime_code_prepared_e8_seed1",
                                                          "regime_code_prepared_e8_seed2"]),
        ("math, 3 passes, copying teacher, 4 offline references (seeds 0, 1)", ["cpu-full-math_seed0",
                                                                                "cpu-full-math_seed1"]),
        ("math, 8 passes, copying teacher, 8 offline references (seeds 2–5)", MATH_OFF8),
        ("medical, 3 passes, copying teacher, 4 offline references (seed 0)",
         ["regime_medical_prepared_offline4_seed0"]),
    ],
    "eight-passes": [
        ("code, copying teacher (seed 1)", ["regime_code_prepared_e8_seed1"]),
        ("code, copying teacher (seed 2)", ["regime_code_prepared_e8_seed2"]),
        ("code, restated teacher (seed 1)", ["regime_code_restated_e8_seed1"]),
        ("math, copying teacher, matched references (seed 1)", ["regime_math_prepared_e8_seed1"]),
        ("math, copying teacher, matched references (seeds 2, 3)", ["regime_math_prepared_e8_seed2",
                                                                    "regime_math_prepared_e8_seed3"]),
    ],
    "references": [(f"math, 8 passes, 8 offline references (seed {s})",
                    [f"regime_math_prepared_e8_offline8_seed{s}"]) for s in (1, 2, 3, 4, 5)]
                  + [("math, 8 passes, 8 offline references (seeds 2–5)", MATH_OFF8)],
    "readme-code": [("3 passes, copying teacher (seeds 0, 1)", ["make_study_default_seed0",
                                                               "regime_code_prepared_seed1"]),
                    ("8 passes, copying teacher (seeds 1, 2)", ["regime_code_prepared_e8_seed1",
                                                                "regime_code_prepared_e8_seed2"]),
                    ("8 passes, plan teacher, 8 offline references, 48 candidates (development seed 8)",
                     ["protocol-dev-code-plan-seed8"])],
    "readme-math": [("8 passes, 8 offline references (seeds 2–5)", MATH_OFF8)],
    "readme-medical": [("3 passes, 4 offline references (seed 0)", ["regime_medical_prepared_offline4_seed0"])],
}
FILES = {"headline": "docs/results.md", "eight-passes": "docs/results.md", "references": "docs/results.md",
         "protocol-dev": "docs/results.md", "protocol-test": "docs/results.md",
         "readme-verdict": "README.md", "readme-code": "README.md", "readme-math": "README.md",
         "readme-medical": "README.md"}
HEADER = ("| design | targets | Leaky | best OUT-only baseline | Leaky − it (paired) | best online attack (IN+OUT) "
          "| paper: max OUT-only baseline per target | TPR@1% FPR, Leaky / baseline (negatives) |\n"
          "|---|---|---|---|---|---|---|---|")


NOTHING_YET = "| no test seed has finished |" + " |" * 7
PUBLISHED = ("| *published: Qwen2.5 students, over math, medical and code* | 15 | Leaky 0.875 | strongest on the same "
             "fresh trajectories 0.826 | +0.049 (no CI published) | — | 0.614 (the strongest standard baseline per "
             "target) | — |")
"""The published result, the last row of each README domain table: the paper reports it over its 15 targets of all
domains together, so each domain's table repeats it."""


def recorded_choices(results: Path) -> dict:
    """results/protocol_choices.json (domain -> the rule's choice), {} before any rule has run."""
    choices_file = results / "protocol_choices.json"
    return json.loads(choices_file.read_text(encoding="utf-8")) if choices_file.is_file() else {}


def protocol_dev_rows(results: Path = RESULTS) -> list[tuple[str, list[str]]]:
    """(label, [run]) per development run of the protocol's design with a stored scores.parquet, for each domain whose
    choice results/protocol_choices.json records (code, medical, math order): the runs its rule read, then the one
    that chooses the comparator (amendment 4) when it is not among them."""
    names, rows, choices = protocol_runs.protocol_names(), [], recorded_choices(results)
    for domain in ("code", "medical", "math"):
        if domain not in choices:
            continue
        comparator = protocol_runs.comparator_dev_runs(domain, choices[domain]["chosen"])
        runs = list(dict.fromkeys([*choices[domain].get("dev_runs", []), *comparator]))
        for run in runs:
            if run in names and (results / run / "scores.parquet").is_file():
                option = protocol_runs.DESCRIBED[names[run][1]]
                rows.append((f"{domain}, {option}, development seed {protocol_runs.DEV_SEED}"
                             + (" (chooses the comparator)" if run in comparator else ""), [run]))
    return rows


def finished_test_seeds(results: Path, domain: str, chosen: str) -> list[tuple[int, str]]:
    """(seed, run name) of the domain's test seeds of the chosen option whose scores.parquet `results` holds."""
    named = [(s, protocol_runs.run_name(domain, chosen, s)) for s in protocol_runs.TEST_SEEDS]
    return [(s, name) for s, name in named if (results / name / "scores.parquet").is_file()]


def protocol_test_rows(results: Path = RESULTS) -> list[tuple[str, list[str], list[str]]]:
    """(label, test runs, development runs) per row of the prospective test, from what `results` holds: for each
    domain whose choice results/protocol_choices.json records (code, medical, math order), each test seed with a
    stored scores.parquet alone, then, once two are stored, them pooled (the decision) and the pooled reading with
    the comparator of the domain's stored development seeds. The comparator is chosen on
    protocol_runs.comparator_dev_runs (amendment 4)."""
    choices = recorded_choices(results)
    rows = []
    for domain in ("code", "medical", "math"):
        if domain not in choices:
            continue
        chosen = choices[domain]["chosen"]
        dev = protocol_runs.comparator_dev_runs(domain, chosen)
        done = finished_test_seeds(results, domain, chosen)
        what = f"{domain}, {chosen}"
        rows += [(f"{what}, test seed {s}", [name], dev) for s, name in done]
        if len(done) > 1:
            seeds = ", ".join(str(s) for s, _ in done)
            names = [name for _, name in done]
            rows.append((f"**{what}, test seeds {seeds} pooled: the decision**", names, dev))
            old_label, old_runs = protocol_runs.STORED_DEV_RUNS[domain]
            rows.append((f"{what}, test seeds {seeds} pooled, comparator from {old_label}", names, old_runs))
    return rows


VERDICT_HEADER = ("| domain | setting, fixed on development seed 8 | development seed 8: Leaky − comparator "
                  "| test seeds with scores | test seeds pooled: Leaky − comparator (paired 95% CI) "
                  "| TPR@1% FPR, Leaky / comparator (negatives); Δ [95% CI] | verdict |\n"
                  "|---|---|---|---|---|---|---|")


def _reading(pool, runs: list[Path], dev: list[Path] | None = None) -> dict:
    """pool_runs.decision on the runs' real targets read together; with `dev`, against the comparator chosen on those
    development runs (without, against the runs' own best OUT-only baseline)."""
    n_boot, seed = pool.common_bootstrap_settings(runs)
    chosen = pool.dev_choices(pool.pooled_scores(dev), n_boot=n_boot, seed=seed) if dev else None
    return pool.decision(pool.pooled_scores(runs), n_boot=n_boot, seed=seed, chosen=chosen)


def _difference(r: dict) -> str:
    return f"{r['delta']:+.3f} [{r['delta_lo']:+.3f}, {r['delta_hi']:+.3f}] vs {r['baseline_attack']}"


def verdict_lines(pool, results: Path = RESULTS) -> list[str]:
    """The README's verdict: per domain (code, medical, math) the setting its rule fixed, the development reading,
    how many test seeds have scores, their pooled reading against the development-chosen comparator, and the
    decision of docs/protocol.md once every test seed has scores; then the goal (Leaky leads in >= 2 of 3 domains).
    A domain whose choice is not recorded yet reads 'pending'."""
    choices = recorded_choices(results)
    lines, decided, leads = VERDICT_HEADER.splitlines(), 0, 0
    n_test = len(protocol_runs.TEST_SEEDS)
    for domain in ("code", "medical", "math"):
        if domain not in choices:
            lines.append(f"| {domain} | not fixed yet: development seed 8 has not finished | — | 0 of {n_test} "
                         "| — | — | pending |")
            continue
        chosen = choices[domain]["chosen"]
        dev = [results / r for r in protocol_runs.comparator_dev_runs(domain, chosen)]
        dev_stored = all((d / "scores.parquet").is_file() for d in dev)
        dev_cell = _difference(_reading(pool, dev)) if dev_stored else "not stored"
        done = finished_test_seeds(results, domain, chosen)
        seeds = ", ".join(str(s) for s, _ in done)
        seeds_cell = f"{len(done)} of {n_test}" + (f" (seed{'s' * (len(done) > 1)} {seeds})" if done else "")
        pooled_cell = tpr_cell = "—"
        verdict = (f"pending: {len(done)} of {n_test} test seeds" if dev_stored
                   else "pending: the development run that chooses the comparator is not stored")
        if done and dev_stored:
            r = _reading(pool, [results / name for _, name in done], dev)
            pooled_cell = _difference(r) + ("" if len(done) == n_test else " (interim)")
            d = r["tpr_difference"]
            tpr_cell = (f"{r['leaky_tpr@1%']:.3f} / {r['baseline_tpr@1%']:.3f} ({r['n_neg']}); "
                        f"Δ {d['delta']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"
                        if pd.notna(d["delta"]) else f"not resolvable ({r['n_neg']})")
            if len(done) == n_test:
                decided += 1
                leads += bool(r["reached"])
                missing = [why for why, ok in (("the paired CI reaches 0", r["auroc_lead"]),
                                               ("TPR@1% not above the comparator's", r["tpr_lead"])) if not ok]
                verdict = "**leads**" if r["reached"] else "does not lead: " + " and ".join(missing)
        lines.append(f"| {domain} | {protocol_runs.DESCRIBED[chosen]} | {dev_cell} | {seeds_cell} | {pooled_cell} "
                     f"| {tpr_cell} | {verdict} |")
    lines += ["", f"Goal, Leaky leads in at least 2 of the 3 domains: **{goal_status(decided, leads)}**."]
    return lines


def goal_status(decided: int, leads: int, domains: int = 3, needed: int = 2) -> str:
    """The protocol's goal (a lead in `needed` of `domains` domains) given the domains decided and how many lead:
    reached, not reached (too few domains left to reach it), or open."""
    if leads >= needed:
        return "reached"
    if leads + domains - decided < needed:
        return "not reached"
    return f"open ({decided} of {domains} domains decided, {leads} with a lead)"


def row(pool, label: str, runs: list[str], chosen: dict[str, str] | None = None, results: Path = RESULTS) -> str:
    """One markdown row: the runs' real targets read together; with `chosen` (pool_runs.dev_choices of development
    runs), the baselines fixed there are read on these (selection-free)."""
    dirs = [results / r for r in runs]
    n_boot, seed = pool.common_bootstrap_settings(dirs)
    t = pool.pooled_tables(pool.pooled_scores(dirs), n_boot=n_boot, seed=seed, chosen=chosen)
    h = t["headline"]
    scope = "all" if "all" in set(h["domain"]) else h["domain"].iloc[0]
    h = h[h["domain"] == scope].set_index("method")
    get = lambda m: h.loc[m] if m in h.index else None  # noqa: E731
    lk, base, online, paper = (get("Leaky"), get("best OUT-only baseline"), get("best online attack (IN+OUT)"),
                               get("paper: max OUT-only baseline per target"))
    tpr = "TPR@1% (normalised pool)"
    if pd.notna(lk[tpr]):
        low = f"{lk[tpr]:.3f} / {base[tpr]:.3f} ({int(lk['n_neg'])})"
    else:
        low = f"not resolvable ({int(lk['n_neg'])})"
    cells = [label, str(int(lk["n_targets"])), f"{lk['attack']} {lk['mean per-target AUROC [95% CI]']}",
             f"{base['attack']} {base['mean per-target AUROC [95% CI]']}", base["Δ Leaky − this [95% CI]"],
             f"{online['attack']} {online['mean per-target AUROC [95% CI]']}" if online is not None else "—",
             f"{paper['mean per-target AUROC [95% CI]']}" if paper is not None else "—", low]
    return "| " + " | ".join(cells) + " |"


def table(pool, name: str, results: Path = RESULTS) -> str:
    if name == "readme-verdict":
        return "\n".join(verdict_lines(pool, results))
    if name == "protocol-dev":
        return "\n".join([HEADER] + [row(pool, label, runs, results=results)
                                      for label, runs in protocol_dev_rows(results)])
    if name == "protocol-test":
        rows, chosen = [], {}  # a domain's development runs serve several rows: their choice is read once
        for label, runs, dev in protocol_test_rows(results):
            if tuple(dev) not in chosen:
                n_boot, seed = pool.common_bootstrap_settings([results / r for r in runs])
                chosen[tuple(dev)] = pool.dev_choices(pool.pooled_scores([results / r for r in dev]), n_boot=n_boot,
                                                      seed=seed)
            rows.append(row(pool, label, runs, chosen[tuple(dev)], results))
        return "\n".join([HEADER] + (rows or [NOTHING_YET]))
    rows = [row(pool, label, runs, results=results) for label, runs in ROWS[name]]
    return "\n".join([HEADER] + rows + ([PUBLISHED] if FILES[name] == "README.md" else []))


def replace_block(text: str, name: str, body: str, path: str) -> str:
    pattern = re.compile(rf"(<!-- table:{re.escape(name)} -->\n).*?(\n<!-- /table:{re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no <!-- table:{name} --> block")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    args = ap.parse_args()
    pool = pool_runs
    texts = {f: (ROOT / f).read_text(encoding="utf-8") for f in set(FILES.values())}
    new = dict(texts)
    for name, f in FILES.items():
        new[f] = replace_block(new[f], name, table(pool, name), f)
    changed = [f for f in texts if new[f] != texts[f]]
    if args.check:
        print("tables differ in: " + ", ".join(changed) if changed else "tables match the stored scores")
        sys.exit(1 if changed else 0)
    for f in changed:
        (ROOT / f).write_text(new[f], encoding="utf-8")
    print("rewrote: " + (", ".join(changed) or "nothing"))


if __name__ == "__main__":
    main()
