"""Shards of one study (run-study --domain) and their pool (leakaudit pool): invariants and golden values."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from filelock import FileLock
from sklearn.metrics import roc_auc_score

from conftest import experiment_script
from fake_run import fake_scores
from leakaudit.cli import main
from leakaudit.config import dump_config, load_config, restrict_domains
from leakaudit.errors import ConfigError, InputError
from leakaudit.io import write_json, write_text
from leakaudit.locks import RUN_LOCK
from leakaudit.membership import keep_matrix_plan
from leakaudit.metrics import normalise_scores, normalise_within_target
from leakaudit.pool import POOL_FILE, first_difference, pool_runs
from leakaudit.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]


# ---- shards -------------------------------------------------------------------------------------------------
def test_restrict_domains_keeps_the_recipe_and_names_the_shard():
    whole = load_config(preset="cpu-full")
    shard = restrict_domains(whole, ["medical"])
    assert shard.name == "cpu-full-medical" and list(shard.data.domains) == ["medical"]
    a, b = whole.hashed_dict(), shard.hashed_dict()
    for d in (a, b):
        d.pop("name"), d["data"].pop("domains")
    assert first_difference(a, b) is None
    assert restrict_domains(whole, ["medical", "code"]).name == "cpu-full-medical-code"  # in data.domains order (math, medical, code)
    assert restrict_domains(whole, []) is whole


def test_restrict_domains_refuses_an_unknown_domain():
    with pytest.raises(ConfigError, match="--domain chess: not a domain of this study"):
        restrict_domains(load_config(preset="cpu-full"), ["chess"])


def test_run_study_with_an_unknown_domain_exits_2_and_writes_nothing(tmp_path, capsys):
    rc = main(["run-study", "--preset", "cpu-full", "--domain", "chess", "--set", f"out_root={tmp_path}"])
    assert rc == 2 and "--domain chess" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_shards_plan_is_the_whole_studys_plan_of_its_domain():
    """What makes a pool of shards the whole study (but for the teacher): a domain's candidates, population,
    students and keep matrix depend on the seed and the domain's name only, not on the other domains."""
    pools = {d: [f"{d}-{i:03d}" for i in range(40)] for d in ("code", "math", "medical")}
    bg = {d: [f"{d}-bg{i}" for i in range(6)] for d in pools}
    ref = {d: [f"{d}-ref{i}" for i in range(8)] for d in pools}
    kw = dict(n_students=8, n_candidates=8, n_population=8, seed=3, keep_design="balanced_subsets", n_offline=2)
    whole = keep_matrix_plan(pools, background=bg, reference_records=ref, **kw)
    shard = keep_matrix_plan({"math": pools["math"]}, background={"math": bg["math"]},
                             reference_records={"math": ref["math"]}, **kw)
    assert shard.candidates["math"] == whole.candidates["math"]
    assert shard.population["math"] == whole.population["math"]
    assert shard.models == {m: v for m, v in whole.models.items() if v["domain"] == "math"}
    rows = whole.table[whole.table.model_id.isin(list(shard.models))].reset_index(drop=True)
    pd.testing.assert_frame_equal(shard.table.reset_index(drop=True), rows)


# ---- pooling ------------------------------------------------------------------------------------------------
def write_shard(root: Path, domain: str, *, preset: str = "cpu-full", overrides=()) -> Path:
    """A finished shard as far as pooling reads it: study.yaml of `preset` restricted to `domain`, the fake
    run's score rows of that domain (tests/fake_run.py), records.jsonl, a realism card and literalness files."""
    cfg = restrict_domains(load_config(preset=preset, overrides=list(overrides)), [domain])
    rd = RunDir(root)
    root.mkdir(parents=True)
    write_text(rd.config, dump_config(cfg))
    scores = fake_scores(seed=1)
    scores[scores.domain == domain].to_parquet(rd.scores, index=False)
    with open(rd.records, "w", encoding="utf-8") as f:
        for i in range(40):
            f.write(json.dumps({"record_id": f"{domain}-r{i:03d}", "domain": domain, "prompt": f"Q{i} ({domain})?",
                                "privileged": f"solution {i}", "answer": str(i), "source": "fake",
                                "meta": {}}) + "\n")
    # a real card (the medical study's with offline references, seed 0), relabelled to this shard's domain
    card = (REPO / "tests/fixtures/realism_medical.json").read_text()
    write_text(rd.realism, card.replace('"medical', f'"{domain}'))
    write_json(rd.env, {"cpu": f"machine of {domain}"})
    write_json(rd.teacher_literalness, {"teacher": "prepared", "teacher_model": "models/_teacher",
                                        "sft_target": "privileged", "sft": {"n_records": 80},
                                        "domains": {domain: {"privileged_with_context": -0.01,
                                                             "privileged_without_context": -1.5,
                                                             "restated_with_context": -1.0}},
                                        "per_record": {f"{domain}-r000": {"domain": domain}}})
    # two records of one real target: similarity 0.5 (member) and 0.25 (non-member)
    rows = [{"record_id": f"{domain}-r000", "target": f"{domain}-0", "is_member": True, "null_check": False,
             "privileged": 0.5, "restated": 0.4},
            {"record_id": f"{domain}-r001", "target": f"{domain}-0", "is_member": False, "null_check": False,
             "privileged": 0.25, "restated": 0.2}]
    write_json(rd.sample_literalness, {"similarity": "difflib", "per_record": rows,
                                       "targets": {f"{domain}-0": {"domain": domain, "null_check": False}},
                                       "pooled_real_targets": {}})
    return root


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    base = tmp_path_factory.mktemp("pool")
    shards = [write_shard(base / f"cpu-full-{d}", d) for d in ("code", "math")]
    out = base / "pooled"
    pool_runs(out, shards, n_boot=50, seed=0, n_perm=20)
    return out, shards


def test_pool_keeps_each_domains_rows_and_pools_over_all_targets(pooled):
    out, shards = pooled
    metrics = pd.read_csv(out / "metrics.csv")
    scores = pd.concat([pd.read_parquet(s / "scores.parquet") for s in shards], ignore_index=True)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "scores.parquet"), scores)
    real = scores[(scores.attack == "leaky") & ~scores.null_check]
    row = metrics[(metrics.level == "all") & (metrics.attack == "leaky") & ~metrics.null_check.astype(bool)].iloc[0]
    assert row.n_targets == 4  # code-0, code-1, math-0, math-1
    # pooled rows read each target's scores after the label-free robust z-score within it (one scale)
    z = normalise_within_target(normalise_scores(real))
    assert row.auroc == pytest.approx(roc_auc_score(z.is_member, z.score))
    for target, g in real.groupby("target"):
        t = metrics[(metrics.level == "target") & (metrics.attack == "leaky") & (metrics.target == target)].iloc[0]
        assert t.auroc == pytest.approx(roc_auc_score(g.is_member, g.score))


def test_pool_reports_the_mean_per_target_auroc_over_every_target(pooled):
    out, _ = pooled
    metrics = pd.read_csv(out / "metrics.csv")
    real = ~metrics.null_check.astype(bool)
    per_target = metrics[(metrics.level == "target") & (metrics.attack == "leaky") & real]
    mean = metrics[(metrics.level == "target_mean") & (metrics.label == "leaky") & (metrics.domain == "*") & real]
    assert mean.iloc[0].n_targets == 4
    assert mean.iloc[0].auroc == pytest.approx(per_target.auroc.mean())


def test_pool_records_its_shards_and_joins_their_cards(pooled):
    out, shards = pooled
    pool = json.loads((out / POOL_FILE).read_text())
    assert [s["path"] for s in pool["shards"]] == [str(s) for s in shards]
    assert [s["domains"] for s in pool["shards"]] == [["code"], ["math"]]
    assert [s["env"] for s in pool["shards"]] == [{"cpu": "machine of code"}, {"cpu": "machine of math"}]
    assert not (out / "env.json").exists()  # shards may come from different machines
    realism = json.loads((out / "realism.json").read_text())
    assert sorted(realism["domains"]) == ["code", "math"] and len(realism["targets"]) == 2 * 9  # 8 targets + the null target each
    teacher = json.loads((out / "teacher_literalness.json").read_text())
    assert sorted(teacher["domains"]) == ["code", "math"] and teacher["sft"] is None
    samples = json.loads((out / "sample_literalness.json").read_text())
    # members 0.5 and 0.5, non-members 0.25 and 0.25 over both shards: AUROC 1
    assert samples["pooled_real_targets"]["members"] == pytest.approx(0.5)
    assert samples["pooled_real_targets"]["non_members"] == pytest.approx(0.25)
    assert samples["pooled_real_targets"]["auroc"] == pytest.approx(1.0)
    cfg = load_config(out / "study.yaml")
    assert list(cfg.data.domains) == ["code", "math"] and cfg.name == "pooled"
    assert (out / "report.html").is_file() and (out / "blind_text_null.csv").is_file()


def test_pool_again_from_the_same_shards_rewrites_the_same_metrics(pooled):
    out, shards = pooled
    before = (out / "metrics.csv").read_text()
    pool_runs(out, shards, n_boot=50, seed=0, n_perm=20)
    assert (out / "metrics.csv").read_text() == before


def test_run_table_reads_a_pool_of_several_domains(pooled):
    """experiments/run_table.py on a pool: the pooled rows are the level over all domains by default (it failed on a
    pool before: the domain level has one row per domain), or one domain's with domain='math'."""
    out, _ = pooled
    run_table = experiment_script("run_table")
    m = pd.read_csv(out / "metrics.csv")
    real = ~m.null_check.astype(bool)
    every = m[(m.level == "target_mean") & (m.label == "leaky") & (m.domain == "*") & real].iloc[0]
    math = m[(m.level == "target_mean") & (m.label == "leaky") & (m.domain == "math") & real].iloc[0]
    label = "**Leaky** (target − max OUT reference, rectified)"
    cells = run_table.column(out)
    assert cells[label] == f"{every.auroc:.3f} [{every.auroc_lo:.3f}, {every.auroc_hi:.3f}]"
    assert cells["targets / members / non-members (all targets)"].startswith("4 / ")
    assert "[code] realism: sample entropy, nats/token: members / held out" in cells
    cells = run_table.column(out, "math")
    assert cells[label] == f"{math.auroc:.3f} [{math.auroc_lo:.3f}, {math.auroc_hi:.3f}]"
    assert cells["targets / members / non-members (all targets)"].startswith("2 / ")
    assert "realism: sample entropy, nats/token: members / held out" in cells  # one domain: rows unlabelled
    assert not any(k.startswith("[code]") for k in cells)
    with pytest.raises(SystemExit, match="--domain chess: not a domain of this run"):
        run_table.column(out, "chess")


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize("case", ["same_domain", "other_recipe", "one_shard", "missing_scores", "out_is_shard"])
def test_pool_refuses_what_is_not_one_study_and_writes_nothing(tmp_path, capsys, case):
    code = write_shard(tmp_path / "a", "code")
    if case == "same_domain":
        other, match = write_shard(tmp_path / "b", "code"), "domain 'code' is also in"
    elif case == "other_recipe":
        other = write_shard(tmp_path / "b", "math", overrides=["training.learning_rate=3.0e-4"])
        match = "training.learning_rate is 0.0003 here and 0.0001 there"
    elif case == "one_shard":
        other, match = None, "at least two run directories"
    elif case == "missing_scores":
        other = write_shard(tmp_path / "b", "math")
        (other / "scores.parquet").unlink()
        match = "has no scores.parquet"
    else:
        other, match = write_shard(tmp_path / "b", "math"), "must not be one of the shards"
    out = code if case == "out_is_shard" else tmp_path / "pooled"
    before = _files(tmp_path)
    rc = main(["pool", str(code), *([str(other)] if other else []), "--out", str(out)])
    assert rc == 2 and match in capsys.readouterr().err
    assert _files(tmp_path) == before


def test_pool_never_writes_over_a_pool_of_other_shards(tmp_path):
    shards = [write_shard(tmp_path / d, d) for d in ("code", "math")]
    out = tmp_path / "pooled"
    pool_runs(out, shards, n_boot=20, n_perm=0)
    scores = pd.read_parquet(shards[1] / "scores.parquet")
    scores.loc[0, "score"] += 1.0  # the math shard's scores changed: the pool is of other inputs now
    scores.to_parquet(shards[1] / "scores.parquet", index=False)
    before = (out / "metrics.csv").read_text()
    with pytest.raises(InputError, match="something other than a pool of these shards"):
        pool_runs(out, shards, n_boot=20, n_perm=0)
    assert (out / "metrics.csv").read_text() == before


def test_first_difference_names_the_first_dotted_key():
    assert first_difference({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == "a.c"
    assert first_difference({"a": 1}, {"a": 1, "z": 0}) == "z"
    assert first_difference({"a": [1, 2]}, {"a": [1, 2]}) is None


def test_a_shard_gets_the_whole_studys_records_and_plan_of_its_domain(tiny_model_dir, tmp_path):
    """The same through the study itself (records are cut from each domain's own seeded shuffle): a shard's
    records, background, members and model ids are the whole study's for its domain. Nothing is trained."""
    from leakaudit.study import Study

    whole_cfg = load_config(preset="tiny", overrides=[
        f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "name=whole", "data.n_background=4",
        "data.domains={math: {source: champ}, medical: {source: medical}}"])
    whole, shard = Study(whole_cfg, log=lambda m: None), Study(restrict_domains(whole_cfg, ["medical"]),
                                                              log=lambda m: None)
    assert shard.cfg.name == "whole-medical"
    for study in (whole, shard):
        study.prepare()  # loads and checks in memory, writes nothing
        study.close()
    recs_whole = {r: v for r, v in whole.records().items() if v.domain == "medical"}
    assert shard.records() == recs_whole
    pw, ps = whole.plan(), shard.plan()
    assert ps.candidates == {"medical": pw.candidates["medical"]}
    assert ps.background == {"medical": pw.background["medical"]} and len(ps.background["medical"]) == 4
    assert list(ps.models) == [m for m in pw.models if pw.models[m]["domain"] == "medical"]
    rows = pw.table[pw.table.model_id.isin(list(ps.models))].reset_index(drop=True)
    pd.testing.assert_frame_equal(ps.table.reset_index(drop=True), rows)
    assert not any(tmp_path.iterdir())  # records() and plan() write nothing


@pytest.mark.parametrize("held", ["shard", "out"])
def test_pool_refuses_a_shard_or_pooled_directory_another_process_holds(tmp_path, capsys, held):
    """A study still running in a shard (it may rewrite the scores being pooled), or another `leakaudit pool`
    writing the same pooled directory, holds that directory's run lock: the pool exits 2 naming it, writes no
    pooled file, and runs once the lock is free (an earlier refusal's hidden lock file is no obstacle)."""
    shards = [write_shard(tmp_path / d, d) for d in ("code", "math")]
    out = tmp_path / "pooled"
    busy = shards[1] if held == "shard" else out
    busy.mkdir(exist_ok=True)
    holder = FileLock(str(busy / RUN_LOCK))
    holder.acquire()
    try:
        rc = main(["pool", *map(str, shards), "--out", str(out), "--n-boot", "20", "--n-perm", "0"])
    finally:
        holder.release()
    assert rc == 2
    err = capsys.readouterr().err
    assert "another leakaudit process" in err and str(busy) in err
    assert [p.name for p in _files(out)] == ([RUN_LOCK] if held == "out" else [])
    assert main(["pool", *map(str, shards), "--out", str(out), "--n-boot", "20", "--n-perm", "0"]) == 0
    assert (out / "metrics.csv").is_file()


def test_run_table_says_when_tpr_at_1pct_is_not_resolvable():
    """1% of 96 negatives is under one false positive: the run table says so instead of printing the TPR at FPR 0."""
    run_table = experiment_script("run_table")
    key = "TPR@1% FPR, normalised pool: leaky@offline / fresh_loss / LOSS / RMIA (negatives)"
    assert run_table.column(REPO / "results" / "regime_math_prepared_e8_offline8_seed4")[key] == \
        "not resolvable (96 negatives)"
