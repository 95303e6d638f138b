"""`run-study --dry-run` / `audit --dry-run` and the cost model behind them (leakaudit.cost): the plan's counts are
the membership plan's, the arithmetic matches hand-computed values, the rate fit recovers known rates, and a dry run
writes nothing, exits 2 on bad input and starts no executor."""

from __future__ import annotations

import json
import math

import pytest

from leakaudit.cli import main
from leakaudit.config import load_config
from leakaudit.cost import (GPUClass, Lengths, ModelShape, StageCost, StudyCost, fit_rates, read_rates,
                            seconds_on_gpu, study_cost, workload_from_config, write_rates)

SHAPE = ModelShape(hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2, vocab=1000, tied=True)


def _lengths(cfg, prompt=10.0, context=30.0, reference=5.0):
    return {d: Lengths(prompt, context, reference, True) for d in cfg.data.domains}


def test_model_shape_counts_parameters_by_hand():
    # per layer: q,o 64*64 each, k,v 64*32 each, mlp 3*64*128; embedding 1000*64 tied
    per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128
    assert SHAPE.params == 2 * per_layer + 1000 * 64
    assert SHAPE.matmul_params == 2 * per_layer + 1000 * 64  # tied: the head is the embedding
    untied = ModelShape(**{**SHAPE.__dict__, "tied": False})
    assert untied.params == SHAPE.params + 1000 * 64 and untied.matmul_params == SHAPE.matmul_params


def test_tiny_preset_cost_by_hand():
    """tiny: 4 students + 1 null per domain (champ), 2 records each (n_candidates/2), 1 epoch of batch 2, 8 new
    tokens; signals: 5 targets x 4 candidates x 2 trajectories of 8 tokens."""
    cfg = load_config(preset="tiny")
    cost = study_cost(cfg, SHAPE, _lengths(cfg))
    assert cost.models == {"student": 4, "null": 1, "teacher": 0}
    assert cost.opd_steps == 5  # one step of 2 records per model
    s = cost.stages["students"]
    assert s.tokens == {"rollout_prefill": 5 * 2 * 10, "rollout": 5 * 2 * 8, "teacher": 5 * (2 * 30 + 2 * 8),
                        "update": 5 * 2 * (10 + 8)}
    n = SHAPE.matmul_params
    assert s.flops == pytest.approx(2 * n * (100 + 380) + 6 * n * 180 + 2 * n * 80)
    assert s.decode_steps == 5 * 8 and s.jobs == 5
    q = cost.stages["signals"]
    assert q.tokens["sample"] == 5 * 4 * 2 * 8
    # each trajectory: target + base + 1 matched OUT reference (4 students: k = 1); the prompt once (share_prefix)
    assert q.tokens["score_fresh"] == 5 * 4 * 3 * (10 + 2 * 8)
    assert q.tokens["score_fixed"] == (5 + 1) * (4 + 4) * (10 + 5)
    assert cost.stages["teacher"].flops == 0


def test_gpu_estimate_by_hand():
    stage = StageCost(dense_flops=1e15, decode_steps=1000)
    cost = StudyCost(models={}, opd_steps=0, stages={"students": stage}, lengths={}, shape=SHAPE)
    gpu = GPUClass("X", bf16_flops=1e15, bandwidth=1e12, memory_gb=80)
    step = max(SHAPE.params * 2 / (1e12 * 0.5), SHAPE.layers * 1e-3)
    assert seconds_on_gpu(cost, gpu, dense_utilisation=0.5, bandwidth_utilisation=0.5)["students"] == \
        pytest.approx(2.0 + 1000 * step)


def test_fit_rates_recovers_rate_and_per_job_overhead(tmp_path):
    def run(flops, jobs):
        c = StudyCost(models={}, opd_steps=0, lengths={}, shape=SHAPE,
                      stages={"teacher": StageCost(), "students": StageCost(dense_flops=flops, jobs=jobs),
                              "signals": StageCost()})
        return c, {"students": flops / 2e11 + jobs * 30.0}

    (a, ta), (b, tb) = run(4e14, 9), run(2e14, 13)
    rates = fit_rates([a, b], [ta, tb], machine="m", source="synthetic")
    assert rates.rates["students"] == pytest.approx(2e11) and rates.overhead_s["students"] == pytest.approx(30.0)
    path = tmp_path / "rates.json"
    write_rates(rates, path)
    write_rates(rates, path)  # the same machine class is replaced, not added
    assert read_rates(path) == [rates]


def test_config_workload_equals_the_plan_of_a_prepared_study(tmp_path, tiny_model_dir):
    """The config-only count (what prices a preset without its data) is what the membership plan trains and
    scores, on a study with a background, offline references and two null students."""
    from leakaudit.cost import workload_from_study
    from leakaudit.study import Study

    cfg = load_config(preset="tiny", overrides=[
        f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "data.n_candidates=8", "data.n_population=8",
        "data.n_background=4", "data.n_reference_records=4", "plan.n_offline_references=2",
        "plan.n_null_students=2"])
    study = Study(cfg, log=lambda m: None)
    study.prepare(start_executor=False)
    from_plan, from_config = workload_from_study(study), workload_from_config(study.cfg)
    assert sorted(from_plan.trained) == sorted(from_config.trained)
    assert sorted(from_plan.targets) == sorted(from_config.targets)
    assert from_plan.fresh_scored == from_config.fresh_scored
    assert from_plan.fixed_scored == from_config.fixed_scored
    assert not (tmp_path / cfg.name).exists()


def test_run_study_dry_run_prints_the_plan_and_writes_nothing(tmp_path, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["run-study", "--preset", "tiny", "--dry-run", "--gpu", "A100-80GB", "--set",
                 f"base_model={tiny_model_dir}", "--set", f"out_root={tmp_path / 'runs'}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "models to train: 5 (4 student, 1 null)" in out and "OPD steps: 5" in out
    assert "one A100-80GB" in out and "measured on the records" in out
    assert list(tmp_path.iterdir()) == []


def test_dry_run_bad_input_exits_2_and_writes_nothing(tmp_path, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"domain": "math", "prompt": "p"}\n')  # no privileged text
    code = main(["run-study", "--preset", "tiny", "--dry-run", "--set", f"base_model={tiny_model_dir}",
                 "--set", f"out_root={tmp_path / 'runs'}", "--set", f"data.domains.math.source=file",
                 "--set", f"data.domains.math.options.path={bad}"])
    err = capsys.readouterr().err
    assert code == 2 and "bad.jsonl" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
    code = main(["run-study", "--preset", "tiny", "--dry-run", "--gpu", "Z80", "--set",
                 f"base_model={tiny_model_dir}", "--set", f"out_root={tmp_path / 'runs'}"])
    assert code == 2 and "Z80" in capsys.readouterr().err


def test_audit_dry_run_counts_the_references_it_would_train(tmp_path, tiny_model_dir, capsys, monkeypatch):
    from leakaudit.data.sources import load_source

    monkeypatch.chdir(tmp_path)
    recs = load_source("champ", limit=12, seed=1)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs[:6]))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs[6:]))
    code = main(["audit", "--target", tiny_model_dir, "--candidates", str(tmp_path / "c.jsonl"), "--population",
                 str(tmp_path / "p.jsonl"), "--base-model", tiny_model_dir, "--train-references", "3",
                 "--out", str(tmp_path / "audit"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "models to train: 3 (3 reference)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "p.jsonl"]


@pytest.mark.parametrize("preset", ["gpu-paper", "gpu-small"])
def test_gpu_presets_price_from_their_config_alone(preset):
    """Without their hub data: budgets as lengths, the Qwen2.5 shape; the students' step count by hand."""
    cfg = load_config(preset=preset)
    qwen = ModelShape(hidden=896, layers=24, intermediate=4864, heads=14, kv_heads=2, vocab=151936, tied=True)
    from leakaudit.cost import budget_lengths

    cost = study_cost(cfg, qwen, budget_lengths(cfg))
    per_domain = cfg.plan.n_students + cfg.plan.n_null_students + cfg.plan.n_offline_references
    r = cfg.data.n_candidates // 2 + cfg.data.n_background
    assert cost.opd_steps == 3 * per_domain * cfg.training.epochs * math.ceil(r / cfg.training.batch_size)
    assert cost.stages["students"].peak_bytes > 16 * qwen.params


def test_a_study_logs_each_stage_with_its_estimate_and_the_time_left(tmp_path, tiny_model_dir, monkeypatch):
    """Per stage that runs, one line with leakaudit.cost's estimate for this machine class and the study's time left
    (the sum of this and later stages), from the stored rates; no line where no rates match the machine."""
    import leakaudit.envinfo as envinfo
    from leakaudit.cost import read_rates
    from leakaudit.study import Study

    from conftest import tiny_study_config

    machine = read_rates()[0].machine
    monkeypatch.setattr(envinfo, "cpu_info", lambda: {"tag": machine})
    lines: list[str] = []
    cfg = tiny_study_config(tmp_path, tiny_model_dir)
    Study(cfg, progress=False, log=lines.append).run_all(until="students")
    started = [line for line in lines if "] started: about " in line]
    assert started and all(f"rates measured on {machine}" in line for line in started)
    # the tiny preset's teacher is the frozen base (no cost): the first estimated stage is the students'
    assert started[0].startswith("[students] started") and "left for the study" in started[0]
    assert lines.index(started[0]) < next(i for i, x in enumerate(lines) if x.startswith("[students] done in"))

    monkeypatch.setattr(envinfo, "cpu_info", lambda: {"tag": "no-such-machine"})
    lines.clear()
    Study(tiny_study_config(tmp_path / "other", tiny_model_dir), progress=False, log=lines.append).run_all(until="plan")
    assert not [line for line in lines if "] started: about " in line]


def test_a_resumed_study_estimates_only_the_models_left_to_train(tmp_path, tiny_model_dir, monkeypatch):
    """A run resumed with some models DONE: the students stage's estimate counts only the others (it counted every
    model of the plan, so a run resumed near its end still announced the whole stage); all DONE: nothing left. The
    same for the signals stage: targets already sampled and scored, fixed-text scores already written."""
    import leakaudit.envinfo as envinfo
    from leakaudit.cost import estimate_here, read_rates
    from leakaudit.io import mark_done
    from leakaudit.study import Study

    from conftest import tiny_study_config

    machine = read_rates()[0].machine
    monkeypatch.setattr(envinfo, "cpu_info", lambda: {"tag": machine})
    study = Study(tiny_study_config(tmp_path, tiny_model_dir), progress=False, log=lambda m: None)
    study.prepare(start_executor=False)
    models = study.trained_models()
    assert len(models) >= 2
    full = estimate_here(study)[0]["students"]
    assert full > 0
    for i, m in enumerate(models):
        mark_done(study.run.model(m))
        left = estimate_here(study)[0]["students"]
        # the tiny plan's models train on as many records each: the estimate falls by one model's share per model
        assert left == pytest.approx(full * (len(models) - i - 1) / len(models), rel=1e-9)

    # signals: targets sampled and scored (fresh DONE) leave the fixed-text scores; those written too, nothing
    from leakaudit.assemble import BASE_ID

    run, plan = study.run, study.plan()
    signals_full = estimate_here(study)[0]["signals"]
    for v in plan.views():
        mark_done(run.fresh(v.target))
    fixed_only = estimate_here(study)[0]["signals"]
    assert 0 < fixed_only < signals_full
    for m in [BASE_ID, *plan.models]:
        run.fixed(m).parent.mkdir(parents=True, exist_ok=True)
        run.fixed(m).write_bytes(b"")
    assert estimate_here(study)[0]["signals"] == 0


def test_a_run_stopped_mid_scoring_is_priced_as_the_signals_stage_will_rescore_it(tmp_path, tiny_model_dir):
    """The signals stage rescores every target a model serves once any one of them lacks that model's scores (so
    a rerun batches them as an uninterrupted run did); the resumed ETA prices that, not just the missing file
    (it used to count only the missing target, under-pricing a run stopped mid-scoring)."""
    from leakaudit.cost import workload_from_study
    from leakaudit.io import mark_done
    from leakaudit.signals.store import TRAJECTORIES, logp_path
    from leakaudit.study import Study

    from conftest import tiny_study_config

    study = Study(tiny_study_config(tmp_path, tiny_model_dir), progress=False, log=lambda m: None)
    study.prepare(start_executor=False)
    run, plan = study.run, study.plan()
    targets = [v.target for v in plan.views()]
    serves = {}  # model -> [(target, record ids or None)]
    for t, scorers in study.fresh_scorers(targets).items():
        for m, ids in scorers.items():
            serves.setdefault(m, []).append((t, ids))
    model = next(m for m, work in serves.items() if len(work) >= 2)
    for m in {*serves, *plan.models}:  # every model's fixed texts scored, every target sampled
        run.fixed(m).parent.mkdir(parents=True, exist_ok=True)
        run.fixed(m).write_bytes(b"")
    for t in targets:
        run.fresh(t).mkdir(parents=True, exist_ok=True)
        (run.fresh(t) / TRAJECTORIES).write_bytes(b"")
    for m, work in serves.items():  # every score written but one: `model` on its first target
        for t, _ in (work[1:] if m == model else work):
            logp_path(run.fresh(t), m).write_bytes(b"")
    left = workload_from_study(study, unfinished_only=True)
    assert left.targets == [] and left.fixed_scored == {} and left.scoring_jobs == 1
    domain_of = {v.target: v.domain for v in plan.views()}
    expected = {}
    for t, ids in serves[model]:  # all of the model's targets, as the stage rescores them
        d = domain_of[t]
        expected[d] = expected.get(d, 0) + (len(plan.candidates[d]) if ids is None else len(ids))
    assert left.fresh_scored == expected
    assert study.signals_left().scoring == {model: (False, [[t, ids] for t, ids in serves[model]])}
    for t in targets:  # every target DONE: nothing left, whatever its files
        mark_done(run.fresh(t))
    assert study.signals_left().scoring == {} and workload_from_study(study, unfinished_only=True).fresh_scored == {}


def test_a_checkpointed_student_is_priced_by_the_steps_it_has_left(tmp_path, tiny_model_dir, monkeypatch):
    """A student stopped after its checkpoint at step 2 of 3 resumes with one step to run: the resumed ETA prices
    one third of it (it priced the whole student). A checkpoint of other inputs is not resumed and is not counted;
    with checkpoints off the trainer resumes nothing, so nothing is counted either."""
    import dataclasses

    import leakaudit.envinfo as envinfo
    from leakaudit.cost import estimate_here, read_rates, workload_from_study
    from leakaudit.io import checkpoint_dir, read_json, write_json
    from leakaudit.study import Study

    from conftest import tiny_study_config

    class Stop(Exception):
        pass

    def stop_at_third(entry):
        if entry["step"] == 2:
            raise Stop

    machine = read_rates()[0].machine
    monkeypatch.setattr(envinfo, "cpu_info", lambda: {"tag": machine})
    extra = ("training.epochs=3", "training.save_checkpoints=true", "training.checkpoint_every=1")
    study = Study(tiny_study_config(tmp_path, tiny_model_dir, *extra), progress=False, log=lambda m: None)
    study.prepare(start_executor=False)
    models = study.trained_models()
    assert study.training_left() == {m: 1.0 for m in models}
    full = estimate_here(study)[0]["students"]
    with pytest.raises(Stop):
        study.train_one(models[0], step_hook=stop_at_third)
    ckpt = checkpoint_dir(study.run.model(models[0]))
    assert read_json(ckpt / "state.json")["next_step"] == 2
    assert study.training_left() == {models[0]: pytest.approx(1 / 3), **{m: 1.0 for m in models[1:]}}
    assert workload_from_study(study, unfinished_only=True).trained_left[0] == pytest.approx(1 / 3)
    # the tiny plan's models train on as many records each: the estimate falls by two thirds of one model's share
    assert estimate_here(study)[0]["students"] == pytest.approx(full * (len(models) - 2 / 3) / len(models))

    # checkpoints turned off (the same run: they are outside its hash): the trainer resumes nothing
    cfg = study.ctx.cfg
    study.ctx.cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, save_checkpoints=False))
    assert study.training_left()[models[0]] == 1.0
    study.ctx.cfg = cfg
    # the same checkpoint written for other records: the trainer would start afresh, and so does the estimate
    state = read_json(ckpt / "state.json")
    state["fingerprint"]["records"] = state["fingerprint"]["records"][::-1]
    write_json(ckpt / "state.json", state)
    assert study.training_left()[models[0]] == 1.0
