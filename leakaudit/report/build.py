"""build_report: scores.parquet (+ study.yaml, env.json, leak_map.json, records.jsonl, teacher_literalness.json,
sample_literalness.json, models/_teacher/meta.json, and for the realism card plan.json, membership.parquet,
models/*/meta.json, signals/fresh/) -> metrics.json/.csv, blind_text_null.csv, realism.json, plots/, report.html."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from leakaudit.io import staging_dir, write_json, write_text
from leakaudit.literalness import load as load_literalness
from leakaudit.realism import realism_card
from leakaudit.metrics import (DEFAULT_ALPHAS, POOLED, normalise_scores, normalise_within_target, summarise,
                               tpr_key)
from leakaudit.per_target import headline_table, mean_target_tables
from leakaudit.report import html as H
from leakaudit.report import plots
from leakaudit.report.api_section import api_section, load_api
from leakaudit.report.checks import (blind_check_section, design_check, design_check_section, negatives_table,
                                     null_check_table, null_verdict, training_check_section)
from leakaudit.report.blind_null import (BLIND_NULL_PERMUTATIONS, attach_ci, blind_text_null, blind_text_verdict,
                                         read_blind_null, report_permutations)
from leakaudit.report.health import training_health
from leakaudit.report.leakmap import leak_map_figure
from leakaudit.report.load import RunData, candidate_table, load_run, read_records_privileged, read_records_texts
from leakaudit.envinfo import library_versions
from leakaudit.report.provenance import file_sha256, run_config_hash, utc_now
from leakaudit.report.realism_section import realism_section, realism_summary
from leakaudit.report.redact import Redactor
from leakaudit.report.steps import ReportSteps
from leakaudit.report.teacher import literalness_summary, teacher_info, teacher_section
from leakaudit.report.verdict_section import run_study_verdict, verdict_box
from leakaudit.rundir import RunDir

SCHEMA_VERSION = 1
_BOOTSTRAP_METHOD = ("percentile; mean per-target AUROC: two-level (targets with replacement, then members and "
                     "non-members within each drawn target), the same draws for every attack (paired differences); "
                     "one target: stratified by label; pooled rows: records as clusters")
_DEFINITIONS = {"primary statistic": "mean over targets of the per-target AUROC (metrics.csv level target_mean)",
                "pooled rows": "scores robust-z-normalised within each target before pooling (label-free)",
                "threat_model": "OUT-only: references trained without the candidate, or none; IN+OUT: references "
                                "trained on the candidate too (online LiRA / RMIA); check: reads labels (blind text)",
                "tpr@a": "largest TPR over thresholds with FPR <= a", "nan_scores": "lowest score",
                "resolvable@a": "a * n_neg >= 1"}


def compute_metrics(run: RunData, *, n_boot: int, seed: int) -> pd.DataFrame:
    """summarise() over the labelled score rows; an empty frame for an unlabelled audit."""
    labelled = run.labelled
    if labelled.empty:
        return pd.DataFrame()
    return summarise(labelled.assign(is_member=labelled["is_member"].astype(bool)), n_boot=n_boot, seed=seed)


def compute_mean_target(run: RunData, *, n_boot: int, seed: int) -> pd.DataFrame:
    """`leakaudit.per_target.mean_target_tables` over the run's labelled rows (empty for an unlabelled audit)."""
    labelled = run.labelled
    if labelled.empty:
        return pd.DataFrame()
    return mean_target_tables(normalise_scores(labelled.assign(is_member=labelled["is_member"].astype(bool))),
                              n_boot=n_boot, seed=seed)


def run_headline(run: RunData, *, n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """The run's metrics.json headline when the report was built with the mean per-target statistic, else computed
    now (for notebooks)."""
    meta = RunDir(run.root).metrics_json
    stored = json.loads(meta.read_text()).get("headline") if meta.is_file() else None
    if stored and "mean per-target AUROC [95% CI]" in stored[0]:
        return pd.DataFrame(stored)
    return headline_table(compute_mean_target(run, n_boot=n_boot, seed=seed),
                          run_metrics(run, n_boot=n_boot, seed=seed))


def metric_tables(run: RunData, *, n_boot: int, seed: int
                  ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(summarise's rows, the mean per-target table, the headline, metrics.csv's rows): what build_report and
    refresh_metrics both write."""
    metrics = compute_metrics(run, n_boot=n_boot, seed=seed)
    mean_target = compute_mean_target(run, n_boot=n_boot, seed=seed)
    return metrics, mean_target, headline_table(mean_target, metrics), metrics_csv_rows(metrics, mean_target)


def metrics_csv_rows(metrics: pd.DataFrame, mean_target: pd.DataFrame) -> pd.DataFrame:
    """metrics.csv: summarise's rows, then the mean per-target rows as level 'target_mean' (auroc = the mean over
    targets of the per-target AUROC, auroc_lo/hi its two-level bootstrap CI, delta* = primary Leaky − this)."""
    if mean_target.empty:
        return metrics
    m = mean_target.assign(level="target_mean", target=POOLED,
                           domain=mean_target["domain"].where(mean_target["domain"] != "all", POOLED))
    return pd.concat([metrics, m], ignore_index=True)


def run_metrics(run: RunData, *, n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """The run's metrics.csv rows of summarise's levels (target, domain, all) when the report was built, else
    computed now (for notebooks)."""
    if run.metrics is not None:
        return run.metrics[run.metrics["level"].isin(["target", "domain", "all"])].reset_index(drop=True)
    return compute_metrics(run, n_boot=n_boot, seed=seed)


def compute_blind_null(run: RunData, metrics: pd.DataFrame, *, n_perm: int = BLIND_NULL_PERMUTATIONS,
                       seed: int = 0, tick=None) -> pd.DataFrame:
    """`blind_null.blind_text_null` over the run's labelled rows and records.jsonl texts, with the metrics' CIs
    (tick() after each relabelling)."""
    labelled = run.labelled
    if labelled.empty:
        return blind_text_null(labelled, None, n_perm=n_perm, seed=seed)
    null = blind_text_null(labelled, read_records_texts(run.root), n_perm=n_perm, seed=seed, tick=tick)
    return attach_ci(null, metrics)


def run_blind_null(run: RunData, metrics: pd.DataFrame | None = None, *, n_perm: int = BLIND_NULL_PERMUTATIONS,
                   seed: int = 0) -> pd.DataFrame:
    """The run's blind_text_null.csv when the report was built, else computed now (for notebooks)."""
    stored = read_blind_null(RunDir(run.root).blind_text_null)
    if stored is not None:
        return stored
    return compute_blind_null(run, run_metrics(run) if metrics is None else metrics, n_perm=n_perm, seed=seed)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(s)) or "_"


def _jsonable(obj):
    """NaN -> None and numpy scalars -> Python, recursively (metrics.json stays strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _records(df: pd.DataFrame) -> list[dict]:
    return _jsonable(df.to_dict(orient="records")) if not df.empty else []


def roc_labels(headline: pd.DataFrame, metrics: pd.DataFrame, domain: str, present: set[str]) -> list[str]:
    """The attacks of `domain`'s ROC panel: its headline's (Leaky and the best baselines, at most plots.MAX_CURVES);
    where the headline has none there, the plots.MAX_CURVES highest domain-level AUROCs of summarise's rows."""
    picked = headline[headline["domain"] == domain]["attack"] if not headline.empty else pd.Series(dtype=str)
    labels = [a for a in dict.fromkeys(picked) if a in present]
    if not labels and not metrics.empty:
        rows = metrics[(metrics["level"] == "domain") & (metrics["domain"] == domain) & ~metrics["null_check"]]
        labels = [a for a in rows.sort_values("auroc", ascending=False)["label"] if a in present]
    return labels[:plots.MAX_CURVES] or sorted(present)[:plots.MAX_CURVES]


def write_plots(run: RunData, metrics: pd.DataFrame, headline: pd.DataFrame, leak_map: dict | None,
                out_dir: Path) -> dict[str, Path]:
    """Every figure as out_dir/<name>.png; returns name -> final path under run/plots."""
    real = run.real
    families = dict(zip(real["label"], real["family"])) if "family" in real else {}
    made: dict[str, Path] = {}
    if not headline.empty:
        made["auroc_bars"] = plots.save_png(plots.auroc_bars_figure(headline, families), out_dir / "auroc_bars.png")
    for domain, g in real.groupby("domain", sort=True):
        name = f"roc_{_slug(domain)}"
        labels = roc_labels(headline, metrics, domain, set(g["label"]))
        made[name] = plots.save_png(plots.roc_figure(normalise_within_target(g), title=str(domain), labels=labels),
                                    out_dir / f"{name}.png")
    if not headline.empty:
        last = headline["domain"].iloc[-1]
        labels = [a for a in dict.fromkeys(headline[headline["domain"] == last]["attack"]) if a in set(real["label"])]
        made["score_distributions"] = plots.save_png(plots.score_distribution_figure(real, labels),
                                                     out_dir / "score_distributions.png")
    nulls = null_check_table(metrics)
    if not nulls.empty:
        made["null_check"] = plots.save_png(plots.null_check_figure(nulls), out_dir / "null_check.png")
    if leak_map is not None:
        made["leak_map"] = plots.save_png(leak_map_figure(leak_map), out_dir / "leak_map.png")
    return made


def build_report(run_dir: str | Path, *, redact: bool = False, n_boot: int = 1000, seed: int = 0,
                 n_perm: int | None = BLIND_NULL_PERMUTATIONS, realism: dict | None = None,
                 balance: list[dict] | None = None, health: list[dict] | None = None,
                 steps: ReportSteps | None = None) -> Path:
    """Write metrics.json, metrics.csv, blind_text_null.csv, realism.json (leakaudit.realism.realism_card), plots/*.png
    and report.html into `run_dir`; return report.html's path. `seed` seeds the bootstrap and the blind text null's
    `n_perm` relabellings (None: `blind_null.report_permutations` for the run's domains, `leakaudit report`'s
    default).

    redact=True replaces privileged text (record `privileged` strings, privileged config keys, leak-map tokens and
    prompt) with "[redacted]" in every output. `realism`, `balance` and `health` (the realism card, the design
    check's rows, the training check's rows) are computed from the run directory when None; a pooled run
    (leakaudit.pool), which holds no plan or models of its own, passes its shards' instead. `steps` shows each step
    as it finishes (report.steps; default: nothing).
    """
    steps = ReportSteps.silent() if steps is None else steps
    steps.begin(7)
    rd = RunDir(Path(run_dir))
    with steps.step("load scores"):
        run = load_run(rd.root)
        redactor = Redactor(tuple(read_records_privileged(rd.root))) if redact else None
        config = redactor.config(run.config) if redactor else run.config
        leak_map = redactor.leak_map(run.leak_map) if (redactor and run.leak_map) else run.leak_map
    if n_perm is None:
        n_perm = report_permutations(run.real["domain"].nunique() if not run.real.empty else 1)

    with steps.step(f"metrics: {n_boot} bootstrap resamples"):
        metrics, mean_target, headline, rows = metric_tables(run, n_boot=n_boot, seed=seed)
    with steps.step("study verdict"):
        study_verdict = run_study_verdict(run)
        nulls, negatives = null_check_table(metrics), negatives_table(metrics)
    with steps.step(f"blind text null: {n_perm} relabellings") as tick:
        blind = compute_blind_null(run, metrics, n_perm=n_perm, seed=seed, tick=tick)
        verdict = blind_text_verdict(blind)
    with steps.step("checks: design, training, teacher, realism"):
        balance = design_check(rd, run.config) if balance is None else balance
        health = training_health(rd.root / "models") if health is None else health
        teacher_lit, sample_lit = load_literalness(rd.root)
        teacher = teacher_info(rd.root, run.config, teacher_lit)
        realism = realism_card(rd.root) if realism is None else realism

    with steps.step("plots"), staging_dir(rd.plots) as tmp_plots:
        made = write_plots(run, metrics, headline, leak_map, tmp_plots)
    made = {k: rd.plots / p.name for k, p in made.items()}

    with steps.step("write metrics and report.html"):
        write_text(rd.metrics_csv, rows.to_csv(index=False))
        write_text(rd.blind_text_null, blind.to_csv(index=False))
        write_json(rd.realism, _jsonable(realism))
        write_json(rd.metrics_json, _jsonable({
            "schema_version": SCHEMA_VERSION,
            "date": utc_now(),
            "config_hash": run_config_hash(run.config),
            "config": config,
            "seeds": {"bootstrap": seed, "study": run.config.get("seed"), "env": run.env.get("seed")},
            "bootstrap": {"n_boot": n_boot, "confidence": 0.95, "method": _BOOTSTRAP_METHOD},
            "definitions": _DEFINITIONS,
            "versions": library_versions(),
            "env": run.env,
            "inputs": {"scores.parquet": {"sha256": file_sha256(rd.scores), "rows": len(run.scores)}},
            "redacted": redact,
            "results": _records(rows),
            "mean_target_auroc": _records(mean_target),
            "headline": _records(headline),
            "study_verdict": _jsonable(study_verdict),
            "null_check": _records(nulls),
            "blind_text_null": {"n_perm": n_perm, "seed": seed, "confidence": 0.95, **verdict,
                                "rows": _records(blind)},
            "reference_balance": balance,
            "training_health": health,
            "teacher": teacher,
            "literalness": {"measured": {"teacher": teacher_lit is not None, "samples": sample_lit is not None},
                            **literalness_summary(teacher_lit, sample_lit)},
            "realism": realism_summary(realism),
            "plots": sorted(p.name for p in made.values()),
        }))
        page = render_html(run, metrics, headline, nulls, negatives, config, leak_map, made, n_boot=n_boot,
                           seed=seed, balance=balance, health=health, blind=blind, blind_verdict=verdict,
                           teacher=teacher, literalness=(teacher_lit, sample_lit), realism=realism,
                           api=load_api(rd.root), mean_target=mean_target, study_verdict=study_verdict)
        if redactor:
            page = redactor.text(page)
        write_text(rd.report_html, page)
    steps.end()
    return rd.report_html


def refresh_metrics(run_dir: str | Path, *, n_boot: int | None = None, seed: int | None = None) -> Path:
    """Recompute a finished run's metrics from its scores.parquet alone, in place: metrics.csv and metrics.json's
    results, mean_target_auroc, headline, null_check, bootstrap and definitions (the bootstrap settings the run's
    report used, unless given); every other key of metrics.json (blind text null, realism, teacher, health) is kept
    as that report wrote it, and keys this version no longer writes are dropped. For re-reading stored runs with the
    current statistics without the records, plots or permutations a full `build_report` needs. Returns metrics.json.
    """
    rd = RunDir(Path(run_dir))
    old = json.loads(rd.metrics_json.read_text()) if rd.metrics_json.is_file() else {}
    n_boot = int((old.get("bootstrap") or {}).get("n_boot", 1000)) if n_boot is None else n_boot
    seed = int((old.get("seeds") or {}).get("bootstrap") or 0) if seed is None else seed
    run = load_run(rd.root)
    metrics, mean_target, headline, rows = metric_tables(run, n_boot=n_boot, seed=seed)
    fresh = {"results": _records(rows), "mean_target_auroc": _records(mean_target),
             "headline": _records(headline),
             "null_check": _records(null_check_table(metrics)),
             "bootstrap": {"n_boot": n_boot, "confidence": 0.95, "method": _BOOTSTRAP_METHOD},
             "definitions": _DEFINITIONS,
             "inputs": {"scores.parquet": {"sha256": file_sha256(rd.scores), "rows": len(run.scores)}}}
    kept = {k: v for k, v in old.items() if k not in ("paper_statistics", "leaky_vs_baselines")}
    write_text(rd.metrics_csv, rows.to_csv(index=False))
    write_json(rd.metrics_json, _jsonable({**kept, **fresh, "seeds": {**(old.get("seeds") or {}), "bootstrap": seed}}))
    return rd.metrics_json


def render_html(run: RunData, metrics: pd.DataFrame, headline: pd.DataFrame, nulls: pd.DataFrame,
                negatives: pd.DataFrame, config: dict, leak_map: dict | None, made: dict[str, Path], *,
                n_boot: int, seed: int, balance: list[dict] | None = None,
                health: list[dict] | None = None, blind: pd.DataFrame | None = None,
                blind_verdict: dict | None = None, teacher: dict | None = None,
                literalness: tuple[dict | None, dict | None] | None = None, realism: dict | None = None,
                api: dict | None = None, mean_target: pd.DataFrame | None = None,
                study_verdict: dict | None = None) -> str:
    """The report page (config and leak_map already redacted when asked); sections without input are skipped.
    A blind text warning (`blind_null.blind_text_verdict`) opens the page, above the headline. `teacher`
    (report.teacher.teacher_info) and `literalness` (teacher_literalness.json, sample_literalness.json; None for
    a file the run lacks) give the "Teacher and literalness" section, after the blind text check; `realism`
    (leakaudit.realism.realism_card) the "Targets: realism card" section after it; `mean_target`
    (leakaudit.per_target.mean_target_tables) the "Every attack" table after the headline."""
    plot = lambda name, alt: H.image(made[name], alt) if name in made else ""  # noqa: E731
    secs = [box for box in (verdict_box(run, study_verdict),) if box]  # the verdict (an audit's or a study's) leads
    if blind_verdict and blind_verdict["warning"]:
        secs.append(H.section("Warning: members and non-members differ as text",
                              f'<p class="fail">{H.esc(blind_verdict["message"])}</p>'
                              '<p class="note">See the blind text check below.</p>', anchor="blind-warning"))
    if not headline.empty:
        show = headline.drop(columns=["auroc", "auroc_lo", "auroc_hi", "delta", "delta_lo", "delta_hi"])
        secs.append(H.section("Headline: mean per-target AUROC", H.table(show), plot("auroc_bars", "AUROC per domain"),
                              '<p class="note">The statistic is the published one: each target\'s AUROC over its own '
                              'candidates, averaged over targets. CI: 95% two-level percentile bootstrap (targets '
                              'drawn with replacement, then members and non-members within each drawn target), '
                              f'{n_boot} resamples, seed {seed}. Δ = Leaky minus the row on the same resamples (paired; '
                              '> 0: Leaky stronger); p_le_0 = share of resamples with Δ ≤ 0. Threat model: OUT-only '
                              'attacks use references trained without the candidate (or none), as an auditor can; '
                              'IN+OUT (online) attacks also train references ON the candidate, a stronger adversary '
                              'shown beside the comparison. "best" rows are chosen on these labels (favouring the '
                              'baseline) unless chosen_on says a development run. The paper\'s row is the per-target '
                              'maximum over every OUT-only baseline, chosen after seeing each target\'s labels: biased '
                              'upward, shown without a CI. TPR at 1% / 0.1% FPR: one threshold over every target\'s '
                              'scores after a label-free robust z-score within each target (n_neg negatives; blank '
                              'where α · n_neg < 1).</p>', anchor="headline"))
        if mean_target is not None and not mean_target.empty:
            cols = ["null_check", "domain", "label", "family", "threat_model", "n_targets", "auroc", "auroc_lo",
                    "auroc_hi", "sd_targets", "delta", "delta_lo", "delta_hi", "p_le_0"]
            table = mean_target.sort_values(["null_check", "domain", "auroc"], ascending=[True, True, False])
            secs.append(H.section("Every attack: mean per-target AUROC",
                                  "<details><summary>every attack, real targets and null targets</summary>"
                                  + H.table(table[cols].round(3)) + "</details>",
                                  '<p class="note">Rows with null_check true: the same statistics on null targets '
                                  '(trained on no candidate): what they read with no member signal.</p>',
                                  anchor="every-attack"))
    else:
        secs.append(H.section("Candidates", '<p class="note">No membership labels: ranking only.</p>',
                              H.table(candidate_table(run.scores).head(50)), anchor="candidates"))
    if api:
        secs.append(api_section(api))
    if blind_verdict is not None and not metrics.empty:
        secs.append(blind_check_section(blind if blind is not None else pd.DataFrame(), blind_verdict))
    if teacher is not None:
        secs.append(teacher_section(teacher, *(literalness or (None, None))))
    if realism is not None:
        secs.append(realism_section(realism))
    if not nulls.empty:
        ok, read = null_verdict(nulls)
        n_out = int((~nulls["straddles_0.5"].astype(bool)).sum())
        verdict = (f'<p class="{"pass" if ok else "fail"}">Null check {"passed" if ok else "FAILED"}: the null-target '
                   f'AUROC CI of {H.esc(", ".join(read))} {"contains" if ok else "excludes"} 0.5 (every Leaky design '
                   f'must hold it). Across all {len(nulls)} attacks, {n_out} CI(s) exclude 0.5 (about '
                   f'{0.05 * len(nulls):.1f} expected by chance at 95% coverage).</p>')
        secs.append(H.section("Null check", verdict, H.table(nulls), plot("null_check", "null check"),
                              anchor="null"))
    if balance:
        secs.append(design_check_section(balance))
    if health:
        secs.append(training_check_section(health))
    if not negatives.empty:
        secs.append(H.section("Number of negatives", '<p class="note">TPR at FPR α is resolvable only when '
                              'α · n_neg ≥ 1; otherwise the reported value is the TPR at FPR 0.</p>',
                              H.table(negatives), anchor="negatives"))
    rocs = [plot(k, k) for k in sorted(made) if k.startswith("roc_")]
    if rocs:
        secs.append(H.section("ROC curves (per domain, scores normalised within each target)", *rocs,
                              '<p class="note">The headline\'s attacks, pooled over a domain\'s targets after a '
                              'label-free robust z-score within each target; one colour family per attack family '
                              '(same-trajectory blue, fixed-text orange, blind grey), as in the headline\'s bars '
                              '(purple there: the paper\'s per-target maximum, no one attack).</p>', anchor="roc"))
    if "score_distributions" in made:
        secs.append(H.section("Score distributions", plot("score_distributions", "score distributions"),
                              anchor="distributions"))
    if "leak_map" in made:
        lm = leak_map or {}
        prompt, selected = lm.get("prompt", ""), lm.get("selected", "")
        which = (f'<p class="note">Record {H.esc(lm.get("record_id", ""))} of target {H.esc(lm.get("target", ""))}: '
                 f'{H.esc(selected)}.</p>' if selected else "")
        secs.append(H.section("Leak map", which, f'<p class="note">Prompt: {H.esc(prompt)}</p>' if prompt else "",
                              plot("leak_map", "leak map"), anchor="leakmap"))
    if not metrics.empty:
        cols = ["null_check", "level", "label", "family", "target", "domain", "auroc", "auroc_lo", "auroc_hi"]
        cols += [tpr_key(a) for a in DEFAULT_ALPHAS if tpr_key(a) in metrics] + ["n_pos", "n_neg", "n_nan"]
        secs.append(H.section("All metrics", "<details><summary>per attack × target × domain, and pooled "
                              f"(target/domain = {POOLED})</summary>" + H.table(metrics[cols]) + "</details>",
                              anchor="all"))
    secs.append(H.section("Study config", "<details><summary>the resolved config (every default spelled out)</summary>"
                          f"<pre>{H.esc(yaml.safe_dump(config, sort_keys=False))}</pre></details>",
                          f'<p class="note">config hash {H.esc(run_config_hash(run.config))}</p>', anchor="config"))
    if run.env:
        secs.append(H.section("Environment", "<details><summary>versions, machine and seed</summary>"
                              f"<pre>{H.esc(yaml.safe_dump(run.env, sort_keys=True))}</pre></details>",
                              anchor="env"))
    title = f"leakaudit report — {run.config.get('study', run.root.name)}"
    return H.page(title, f"{run.root} · {len(run.scores)} score rows · built {utc_now()}", secs)
