"""`leakaudit audit` is a study with the target given: it resumes, and it never reuses work done for another
target, other candidates or a target changed in place; its records are checked before anything
is written. Its references are trained with the target's recipe (--teacher, --config,
--preset, --set), which audit.json records with where each part came from and the CLI prints; it runs the offline
forms of RMIA and LiRA instead of skipping them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from leakaudit.cli import main
from leakaudit.config import load_config

pytestmark = pytest.mark.heavy  # whole studies/audits: make test runs them, make test-floors does not

FAST = ["--train-references", "2", "--set", "training.epochs=1", "--set", "training.max_new_tokens=4",
        "--set", "training.batch_size=3", "--set", "signals.sampling.n_per_record=2",
        "--set", "signals.sampling.max_new_tokens=4", "--set", "metrics.n_boot=20"]


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def audit_inputs(tmp_path_factory, tiny_model_dir):
    from leakaudit.data.sources import load_source

    tmp = tmp_path_factory.mktemp("audit")
    recs = load_source("champ", limit=12, seed=1)
    cands, pop = recs[:6], recs[6:]
    _write_jsonl(tmp / "cands.jsonl", [{**r.to_dict(), "meta": {"is_member": i % 2 == 0}} for i, r in enumerate(cands)])
    _write_jsonl(tmp / "pop.jsonl", [r.to_dict() for r in pop])
    target = tmp / "target"
    shutil.copytree(tiny_model_dir, target)
    return tmp, target


def _audit(capsys, tmp, target, out, *extra, base_model):
    return _run(capsys, "audit", "--target", target, "--candidates", tmp / "cands.jsonl", "--population",
                tmp / "pop.jsonl", "--base-model", base_model, "--out", out, *FAST, *extra)


@pytest.fixture(scope="module")
def finished_audit(audit_inputs, tiny_model_dir):
    tmp, target = audit_inputs
    out = tmp / "run"
    code = main([str(a) for a in ["audit", "--target", target, "--candidates", tmp / "cands.jsonl", "--population",
                                  tmp / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out, *FAST]])
    assert code == 0
    return out


def test_rerun_resumes_and_changes_nothing(finished_audit, audit_inputs, tiny_model_dir, capsys):
    tmp, target = audit_inputs
    before = _snapshot(finished_audit)
    code, _, err = _audit(capsys, tmp, target, finished_audit, base_model=tiny_model_dir)
    assert code == 0, err
    for stage in ("records", "plan", "students", "signals", "attacks", "report"):
        assert f"[{stage}] skipped" in err
    after = _snapshot(finished_audit)
    assert {k: v for k, v in after.items() if k not in ("env.json",)} == \
        {k: v for k, v in before.items() if k not in ("env.json",)}


def test_another_target_into_the_same_directory_is_refused(finished_audit, audit_inputs, tiny_model_dir_b,
                                                           tiny_model_dir, capsys):
    """Before the fix, the second audit silently reused the first one's references and signals."""
    tmp, _ = audit_inputs
    before = _snapshot(finished_audit)
    code, _, err = _audit(capsys, tmp, tiny_model_dir_b, finished_audit, base_model=tiny_model_dir)
    assert code == 2 and "different config" in err and err.count("\n") == 1
    assert _snapshot(finished_audit) == before


def test_candidates_changed_in_place_are_refused(finished_audit, audit_inputs, tiny_model_dir, capsys, tmp_path):
    tmp, target = audit_inputs
    out = tmp_path / finished_audit.name  # the run name is part of the config
    shutil.copytree(finished_audit, out)
    before = _snapshot(out)
    cands = tmp / "cands.jsonl"
    original = cands.read_text()
    rows = [json.loads(line) for line in original.splitlines()]
    rows[0]["meta"]["is_member"] = not rows[0]["meta"]["is_member"]  # other labels, same path
    try:
        _write_jsonl(cands, rows)
        code, _, err = _audit(capsys, tmp, target, out, base_model=tiny_model_dir)
    finally:
        cands.write_text(original)
    assert code == 2 and "stage 'records'" in err
    assert _snapshot(out) == before


def test_target_retrained_in_place_is_refused(audit_inputs, tiny_model_dir, capsys, tmp_path):
    """Same target path, other weights: signals made by the old model must not be reused."""
    tmp, target = audit_inputs
    target2 = tmp_path / "target"
    shutil.copytree(target, target2)
    out = tmp_path / "run"
    code, _, err = _audit(capsys, tmp, target2, out, base_model=tiny_model_dir)
    assert code == 0, err
    before = _snapshot(out)
    weights = next(target2.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    code, _, err = _audit(capsys, tmp, target2, out, base_model=tiny_model_dir)
    assert code == 2 and "other inputs" in err and "--force" in err
    assert _snapshot(out) == before


def test_audit_outputs_and_recipe(finished_audit):
    import pandas as pd

    from leakaudit.membership import MembershipPlan

    table = pd.read_csv(finished_audit / "candidates.csv")
    assert len(table) == 6 and {"leaky", "loss", "lira_offline", "rmia_offline", "is_member"} <= set(table.columns)
    assert not {"lira_online", "rmia"} & set(table.columns)  # online forms need IN references: none in an audit
    assert table["rmia_offline"].between(0, 1).all() and table["lira_offline"].notna().all()
    audit = json.loads((finished_audit / "audit.json").read_text())
    assert audit["teacher"] == "self" and audit["references_trained_here"] and audit["labels"]
    from leakaudit.scoring import SELECTED_MEMBER

    leak_map = json.loads((finished_audit / "leak_map.json").read_text())  # labelled candidates: a member's map
    assert leak_map["selected"] == SELECTED_MEMBER and leak_map["reference_reduction"] == "max"
    assert leak_map["record_id"] in set(table.loc[table["is_member"].astype(bool), "record_id"])
    plan = MembershipPlan.load(finished_audit)
    trained = set().union(*(plan.members(m) for m in plan.models_of("math", "reference")))
    assert len(set(plan.population["math"]) - trained) >= len(plan.population["math"]) // 4  # RMIA's population
    assert (finished_audit / "stages" / "report.json").is_file() and (finished_audit / "report.html").is_file()


@pytest.mark.parametrize("case", ["mixed_domain", "over_budget", "candidate_in_population"])
def test_bad_audit_records_exit_2_naming_line_and_write_nothing(case, audit_inputs, tiny_model_dir, capsys,
                                                                tmp_path):
    tmp, target = audit_inputs
    cands = [json.loads(line) for line in (tmp / "cands.jsonl").read_text().splitlines()]
    pop = [json.loads(line) for line in (tmp / "pop.jsonl").read_text().splitlines()]
    if case == "mixed_domain":
        cands[3] = {**cands[3], "domain": "medical", "record_id": ""}
        bad, line = "cands.jsonl", 4
    elif case == "over_budget":
        cands[2] = {**cands[2], "privileged": "word " * 500, "record_id": ""}
        bad, line = "cands.jsonl", 3
    else:
        pop[1] = cands[0]
        bad, line = "pop.jsonl", 2
    _write_jsonl(tmp_path / "cands.jsonl", cands)
    _write_jsonl(tmp_path / "pop.jsonl", pop)
    out = tmp_path / "run"
    code, _, err = _run(capsys, "audit", "--target", target, "--candidates", tmp_path / "cands.jsonl",
                        "--population", tmp_path / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out, *FAST)
    assert code == 2 and f"{bad}, line {line}" in err and "record " in err, err
    assert not out.exists()


# ---- offline forms of the attacks that need IN references ----------------------------------------------------------
def test_audit_runs_the_offline_forms_and_reports_their_rows(finished_audit):
    """An audit used to skip RMIA (and LiRA online) for want of IN references; it now runs RMIA's
    offline form (a = 0.3) and LiRA offline, and the metrics have a row for each."""
    import pandas as pd

    scores = pd.read_parquet(finished_audit / "scores.parquet")
    rmia = scores[scores.attack == "rmia_offline"]
    assert len(rmia) == 6 and set(rmia.attack_name) == {"rmia"}
    assert json.loads(rmia.params.iloc[0]) == {"offline": True, "a": 0.3, "gamma": 1.0}
    assert len(scores[scores.attack == "lira_offline"]) == 6
    assert not {"rmia", "lira_online"} & set(scores.attack)
    metrics = pd.read_csv(finished_audit / "metrics.csv")
    label = "label" if "label" in metrics.columns else "attack"
    assert {"rmia_offline", "lira_offline"} <= set(metrics[label])
    audit = json.loads((finished_audit / "audit.json").read_text())
    assert audit["attacks"]["rmia_offline"] == {"name": "rmia", "params": {"offline": True, "a": 0.3, "gamma": 1.0}}
    assert "lira_online" not in audit["attacks"] and "lira_offline" in audit["attacks"]


def test_offline_attacks_replace_each_online_form_in_place():
    from leakaudit.scoring import offline_attacks
    from leakaudit.config import AttackSpecConfig
    from leakaudit.scoring import attack_specs

    default = offline_attacks([])
    names = [(a.display, a.name) for a in default]
    everything = [a.display for a in attack_specs([])]
    assert ("rmia_offline", "rmia") in names and ("lira_offline", "lira_offline") in names
    assert not {"rmia", "lira_online"} & {d for d, _ in names}
    assert len(default) == len(everything) - 1  # lira_online's offline form is already in the list: kept once
    assert [a.display for a in default] == [{"rmia": "rmia_offline"}.get(d, d) for d in everything
                                            if d != "lira_online"]  # in place, order kept
    given = [AttackSpecConfig("rmia", {"a": 0.6, "gamma": 2.0}), AttackSpecConfig("lira_online", {"min_std": 0.01},
                                                                                   label="lira_wide"),
             AttackSpecConfig("rmia", {"offline": True, "a": 0.1}, label="rmia_a01"), AttackSpecConfig("loss")]
    out = {a.display: (a.name, a.params) for a in offline_attacks(given)}
    assert out == {"rmia_offline": ("rmia", {"offline": True, "a": 0.6, "gamma": 2.0}),
                   "lira_wide_offline": ("lira_offline", {"global_variance": True, "min_std": 0.01}),
                   "rmia_a01": ("rmia", {"offline": True, "a": 0.1, "gamma": 1.0}), "loss": ("loss", {})}


# ---- the references' recipe ----------------------------------------------------------------------------------------
def _request(**kw):
    from leakaudit.audit import AuditRequest

    return AuditRequest(target="some/model", candidates=Path("c.jsonl"), population=Path("p.jsonl"), **kw)


def test_recipe_comes_from_teacher_preset_config_and_set_and_says_where(tmp_path):
    from leakaudit.audit import audit_config, recipe_sources

    # nothing given: self-distillation from the frozen base, training from the default preset
    req = _request(overrides=["training.epochs=2"])
    cfg = audit_config(req)
    assert cfg.teacher.kind == "self"
    src = recipe_sources(req)
    assert src["teacher"].startswith("audit default") and src["epochs"] == "--set training.epochs"
    assert src["loss"] == "preset default"
    # --preset: the preset's teacher too (an audit used to self-distil whatever the preset said)
    req = _request(preset="default")
    assert audit_config(req).teacher.kind == "prepared" and recipe_sources(req)["teacher"] == "preset default"
    # --config: its training and teacher sections; --teacher over it; --set over both
    config = tmp_path / "target.yaml"
    config.write_text("preset: quick\nteacher: {kind: prepared}\ntraining: {loss: jsd, epochs: 3}\n")
    req = _request(config=config)
    cfg = audit_config(req)
    assert (cfg.teacher.kind, cfg.training.loss, cfg.training.epochs) == ("prepared", "jsd", 3)
    src = recipe_sources(req)
    assert src["teacher"] == src["loss"] == src["epochs"] == f"--config {config}"
    assert src["batch_size"] == "preset quick"
    req = _request(config=config, teacher="restated", overrides=["training.epochs=1"])
    cfg = audit_config(req)
    assert (cfg.teacher.kind, cfg.training.epochs) == ("restated", 1) and cfg.teacher.sft_target == "restated"
    src = recipe_sources(req)
    assert (src["teacher"], src["epochs"], src["loss"]) == ("--teacher", "--set training.epochs", f"--config {config}")


def test_teacher_flag_takes_a_model_reference(tiny_model_dir_b):
    from leakaudit.audit import audit_config
    from leakaudit.pipeline.audit_plan import reference_recipe
    from leakaudit.membership import disjoint_plan

    cfg = audit_config(_request(teacher=tiny_model_dir_b))
    assert cfg.teacher.kind == tiny_model_dir_b and not cfg.teacher.prepared
    plan = disjoint_plan(["c0", "c1"], ["p0", "p1", "p2", "p3"], domain="math", n_references=2,
                         records_per_reference=2, seed=0)
    recipe = reference_recipe(cfg, plan)
    assert recipe["teacher"] == recipe["teacher_model"] == tiny_model_dir_b and recipe["records_per_reference"] == 2
    assert set(recipe["sources"].values()) == {"study config"}  # no request: the run's own config


def test_teacher_flag_is_part_of_the_config_hash():
    from leakaudit.audit import audit_config

    hashes = {audit_config(_request(teacher=t)).hash() for t in ("self", "prepared", "restated")}
    assert len(hashes) == 3  # an --out holding another teacher's references is refused, never reused


@pytest.mark.parametrize("kw, needle", [
    ({"teacher": "prepard"}, "--teacher 'prepard'"),
    ({"teacher": " "}, "--teacher"),
    ({"preset": "defualt"}, "--preset 'defualt'"),
    ({"config": Path("no_such.yaml")}, "--config"),
    ({"teacher": "self", "overrides": ["teacher.kind=prepared"]}, "--teacher 'self' and --set"),
])
def test_bad_recipe_flags_are_errors_naming_the_flag(kw, needle, tmp_path, monkeypatch):
    from leakaudit.audit import audit_config
    from leakaudit.errors import LeakauditError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(LeakauditError, match=re.escape(needle)):
        audit_config(_request(**kw))


@pytest.mark.parametrize("kw, needle", [
    ({"n_references": 0}, "--train-references: must be >= 1, got 0"),  # was: audit.n_references: ...
    ({"out": Path(".")}, "--out .: must be a non-empty run directory name"),  # was: name: ...
])
def test_audit_settings_from_flags_are_errors_naming_the_flag(kw, needle, tmp_path, monkeypatch):
    from leakaudit.audit import audit_config
    from leakaudit.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        audit_config(_request(**kw))
    assert str(e.value) == needle


def test_bad_teacher_exits_2_naming_it_and_writes_nothing(audit_inputs, tiny_model_dir, capsys, tmp_path):
    tmp, target = audit_inputs
    out = tmp_path / "run"
    code, _, err = _audit(capsys, tmp, target, out, "--teacher", tmp_path, base_model=tiny_model_dir)
    assert code == 2 and "--teacher" in err and "no config.json" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_printed_summary_states_the_recipe(finished_audit, audit_inputs, tiny_model_dir, capsys):
    tmp, target = audit_inputs
    code, out, err = _audit(capsys, tmp, target, finished_audit, base_model=tiny_model_dir)  # resumes
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("references:"))
    assert "2 trained here" in line and "teacher self" in line and "epochs 1" in line and "batch_size 3" in line
    assert "[audit] references: 2 trained here" in err  # logged before the stages run
    recipe = json.loads((finished_audit / "audit.json").read_text())["reference_recipe"]
    assert recipe["teacher"] == "self" and recipe["teacher_model"] == "frozen base (self-distillation)"
    preset = load_config(preset="default").training
    assert (recipe["loss"], recipe["epochs"], recipe["batch_size"], recipe["max_new_tokens"]) == \
        (preset.loss, 1, 3, 4)
    assert recipe["learning_rate"] == preset.learning_rate and recipe["records_per_reference"] >= 1 and recipe["n_references"] == 2
    assert recipe["sources"]["teacher"].startswith("audit default")
    assert recipe["sources"]["epochs"] == "--set training.epochs"
    assert "defaults" in recipe["source"] and "flags" in recipe["source"]


@pytest.fixture(scope="module")
def prepared_audit(audit_inputs, tiny_model_dir, tmp_path_factory):
    tmp, target = audit_inputs
    out = tmp_path_factory.mktemp("prepared") / "run"
    code = main([str(a) for a in ["audit", "--target", target, "--candidates", tmp / "cands.jsonl", "--population",
                                  tmp / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out, *FAST,
                                  "--teacher", "prepared", "--set", "teacher.prep={epochs: 1, batch_size: 3}"]])
    assert code == 0
    return out


def test_prepared_teacher_audit_trains_its_references_with_that_teacher(prepared_audit):
    from leakaudit.data.records import read_jsonl
    from leakaudit.membership import MembershipPlan

    out = prepared_audit
    plan = MembershipPlan.load(out)
    teacher_meta = json.loads((out / "models" / "_teacher" / "meta.json").read_text())
    assert teacher_meta["sft_target"] == "privileged"
    candidates = {r.record_id for r in read_jsonl(out / "records.jsonl")} - set(plan.population["math"])
    assert set(teacher_meta["record_ids"]) <= set(plan.population["math"])
    assert not set(teacher_meta["record_ids"]) & candidates
    refs = plan.models_of("math", "reference")
    assert len(refs) == 2
    for m in refs:  # every reference distilled from the prepared teacher, not from the frozen base
        assert json.loads((out / "models" / m / "meta.json").read_text())["teacher_model"] == \
            str(out / "models" / "_teacher")
    recipe = json.loads((out / "audit.json").read_text())["reference_recipe"]
    assert recipe["teacher"] == "prepared" and recipe["sft_target"] == "privileged"
    assert recipe["sources"]["teacher"] == "--teacher"
    assert recipe["teacher_model"].startswith("models/_teacher")


def _background_inputs(tmp_path, audit_inputs):
    from leakaudit.data.sources import load_source

    tmp, target = audit_inputs
    used = {json.loads(line)["record_id"] for f in ("cands.jsonl", "pop.jsonl") for line in (tmp / f).read_text().splitlines()}
    extra = [r for r in load_source("champ", limit=40, seed=1) if r.record_id not in used][:4]
    return tmp, target, _write_jsonl(tmp_path / "background.jsonl", [r.to_dict() for r in extra]), extra


def test_background_is_trained_on_by_every_reference_and_stated_in_the_recipe(audit_inputs, tiny_model_dir, capsys,
                                                                           tmp_path):
    """An audit's references train with the target's recipe, background included (--background)."""
    tmp, target, background, extra = _background_inputs(tmp_path, audit_inputs)
    out = tmp_path / "run"
    code, stdout, err = _audit(capsys, tmp, target, out, "--background", background, base_model=tiny_model_dir)
    assert code == 0, err
    ids = {r.record_id for r in extra}
    for ref in ("math-ref0", "math-ref1"):
        trained = set(json.loads((out / "models" / ref / "meta.json").read_text())["record_ids"])
        assert ids <= trained and len(trained - ids) >= 1
    recipe = json.loads((out / "audit.json").read_text())["reference_recipe"]
    assert recipe["background"] == {"n_records": 4, "path": str(background)}
    assert "+ a background of 4 records" in next(x for x in stdout.splitlines() if x.startswith("references:"))
    plan = json.loads((out / "plan.json").read_text())
    assert sorted(plan["background"]["math"]) == sorted(ids)


@pytest.mark.parametrize("clash", ["candidate", "population"])
def test_background_holding_a_candidate_or_population_record_exits_2_and_writes_nothing(
        clash, audit_inputs, tiny_model_dir, capsys, tmp_path):
    tmp, target, background, extra = _background_inputs(tmp_path, audit_inputs)
    source = tmp / ("cands.jsonl" if clash == "candidate" else "pop.jsonl")
    stolen = json.loads(source.read_text().splitlines()[0])
    stolen.pop("meta", None)
    _write_jsonl(background, [r.to_dict() for r in extra[:2]] + [stolen])
    out = tmp_path / "run"
    code, _, err = _audit(capsys, tmp, target, out, "--background", background, base_model=tiny_model_dir)
    assert code == 2 and f"{background}, line 3" in err and f"is also a {clash}" in err, err
    assert not out.exists()


def test_a_target_of_pickled_weights_exits_2_before_anything_is_written(audit_inputs, tiny_model_dir, capsys,
                                                                        tmp_path):
    # before: only config.json was checked up front; the run wrote its plan and failed (exit 1) at the first load
    tmp, target = audit_inputs
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(target / "config.json", pickled / "config.json")
    (pickled / "pytorch_model.bin").write_bytes(b"not read")
    out = tmp_path / "run"
    code, _, err = _run(capsys, "audit", "--target", pickled, "--candidates", tmp / "cands.jsonl", "--population",
                        tmp / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out, *FAST)
    assert code == 2 and "audit.target (--target)" in err and "safetensors only" in err, err
    assert not out.exists()


@pytest.mark.parametrize("case", ["string_label", "candidate_text_again"])
def test_audit_inputs_that_would_corrupt_its_labels_or_references_exit_2(audit_inputs, tiny_model_dir, capsys,
                                                                         tmp_path, case):
    tmp, target = audit_inputs
    cands = [json.loads(x) for x in (tmp / "cands.jsonl").read_text().splitlines()]
    pop = [json.loads(x) for x in (tmp / "pop.jsonl").read_text().splitlines()]
    if case == "string_label":  # before: bool("false") is True, so this candidate was labelled a member
        cands[1]["meta"]["is_member"] = "false"
        needle = "meta.is_member must be true or false"
    else:  # before: compared by id only, so references trained on candidate 3's text given under another id
        pop.append({**cands[3], "record_id": "not-the-candidate-id", "meta": {}})
        needle = f"is also a candidate (the text of candidate {cands[3].get('record_id')}"
    _write_jsonl(tmp_path / "cands.jsonl", cands)
    _write_jsonl(tmp_path / "pop.jsonl", pop)
    out = tmp_path / "run"
    code, _, err = _run(capsys, "audit", "--target", target, "--candidates", tmp_path / "cands.jsonl",
                        "--population", tmp_path / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out, *FAST)
    assert code == 2 and needle in err, err
    assert not out.exists()


# ---- the verdict: a null sample no reference trained on, conformal p-values, the report's first box ----------------
def test_audit_verdict_against_a_null_sample_split_off_the_population(finished_audit):
    import numpy as np
    import pandas as pd

    from leakaudit.rundir import NULL_SCORES_FILE
    from leakaudit.membership import MembershipPlan

    plan = MembershipPlan.load(finished_audit)
    null = plan.null_sample("math")
    assert len(null) == 3  # the default: half of a 6-record population (99 needs a population of 198)
    assert not set(null) & set(plan.population["math"]) and len(plan.population["math"]) == 3
    for m in plan.models_of("math", "reference"):
        assert not set(null) & set(plan.members(m))  # no reference trained on the null sample
    scores = pd.read_parquet(finished_audit / "scores.parquet")
    null_scores = pd.read_parquet(finished_audit / NULL_SCORES_FILE)
    assert not set(null) & set(scores.record_id) and set(null_scores.record_id) == set(null)
    table = pd.read_csv(finished_audit / "candidates.csv")
    assert len(table) == 6 and {"p_value", "flagged"} <= set(table.columns)
    # p = (1 + #{null >= s}) / (1 + 3), the candidate's Leaky score against the null sample's (NaN lowest)
    z = null_scores[null_scores.attack == "leaky"].score.to_numpy()
    z = np.where(np.isnan(z), -np.inf, z)
    for s, p in zip(table.leaky, table.p_value):
        s = -np.inf if np.isnan(s) else s
        assert p == pytest.approx((1 + (z >= s).sum()) / 4)
    verdict = json.loads((finished_audit / "audit.json").read_text())["verdict"]
    assert verdict["primary"] == "leaky" and verdict["n_null"] == 3 and verdict["smallest_p"] == 0.25
    assert "split off the population" in verdict["null_source"]
    # 3 null records cannot reach 0.1: said, and nothing is flagged
    assert any("above --fdr 0.1, so no candidate can be flagged" in w for w in verdict["warnings"])
    assert not table.flagged.any() and verdict["flagged_ids"] == []
    assert verdict["epsilon"]["tpr"] == 0 and verdict["epsilon"]["epsilon_lb"] == 0
    html = (finished_audit / "report.html").read_text()
    assert html.index("<section") == html.index('<section id="verdict">')  # the verdict leads the report
    assert "above --fdr 0.1" in html


def test_unlabelled_audit_with_a_null_sample_file(audit_inputs, tiny_model_dir, capsys, tmp_path):
    import pandas as pd

    from leakaudit.membership import MembershipPlan

    tmp, target, extra_file, extra = _background_inputs(tmp_path, audit_inputs)
    cands = [json.loads(line) for line in (tmp / "cands.jsonl").read_text().splitlines()]
    _write_jsonl(tmp_path / "cands.jsonl", [{k: v for k, v in r.items() if k != "meta"} for r in cands])
    out = tmp_path / "run"
    code, stdout, err = _run(capsys, "audit", "--target", target, "--candidates", tmp_path / "cands.jsonl",
                             "--population", tmp / "pop.jsonl", "--null-sample", extra_file, "--fpr", "0.3",
                             "--base-model", tiny_model_dir, "--out", out, *FAST)
    assert code == 0, err
    plan = MembershipPlan.load(out)
    assert sorted(plan.null_sample("math")) == sorted(r.record_id for r in extra)
    assert len(plan.population["math"]) == 6  # the whole population is the references'
    table = pd.read_csv(out / "candidates.csv")
    assert "is_member" not in table.columns and (table.flagged == (table.p_value <= 0.3)).all()
    verdict = json.loads((out / "audit.json").read_text())["verdict"]
    assert verdict["level"] == {"kind": "fpr", "value": 0.3} and verdict["warnings"] == []
    assert "--null-sample" in verdict["null_source"] and verdict["epsilon"] is None
    line = next(x for x in stdout.splitlines() if x.startswith("verdict: "))
    assert line.startswith(("verdict: No evidence", "verdict: Candidates score higher", "verdict: The test is not"))
    assert 'id="verdict"' in (out / "report.html").read_text()  # no labels: the report is the verdict


def test_a_null_sample_holding_a_candidate_exits_2_and_writes_nothing(audit_inputs, tiny_model_dir, capsys,
                                                                      tmp_path):
    tmp, target, extra_file, extra = _background_inputs(tmp_path, audit_inputs)
    stolen = json.loads((tmp / "cands.jsonl").read_text().splitlines()[2])
    stolen.pop("meta", None)
    _write_jsonl(extra_file, [extra[0].to_dict(), stolen])
    out = tmp_path / "run"
    code, _, err = _audit(capsys, tmp, target, out, "--null-sample", extra_file, base_model=tiny_model_dir)
    assert code == 2 and f"{extra_file}, line 2" in err and "is also a candidate" in err, err
    assert not out.exists()


def test_an_audit_without_its_primary_attack_is_refused_before_it_runs():
    from leakaudit.audit import audit_config
    from leakaudit.errors import ConfigError

    with pytest.raises(ConfigError, match="verdict rests on 'leaky'"):
        audit_config(_request(overrides=["attacks=[{name: loss}, {name: leaky, label: leaky_x}]"]))
    assert [a.display for a in audit_config(_request(overrides=["attacks=[{name: leaky}]"])).attacks] == ["leaky"]
