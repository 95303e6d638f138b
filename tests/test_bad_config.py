"""Bad-input corpus for study configs (issue 12, item 2): everything is checked by `load_config`, before any stage
runs or any file is written, and every error is a ConfigError naming the dotted location of the bad value."""

import re

import pytest

from leakaudit.config import load_config
from leakaudit.errors import ConfigError, InputError

AUDIT = "audit={target: some/model, candidates: c.jsonl"  # completed by each case

CASES = [
    # unknown keys, one per section
    (["bogus=1"], "bogus: unknown key"),
    (["data.bogus=1"], "data.bogus: unknown key"),
    (["data.domains.math.bogus=1"], "data.domains.math.bogus: unknown key"),
    (["data.domains.math.options={versoin: v0}"], "data.domains.math.options.versoin: unknown option"),
    (["plan.bogus=1"], "plan.bogus: unknown key"),
    (["teacher.bogus=1"], "teacher.bogus: unknown key"),
    (["teacher.prep.epochz=2"], "teacher.prep.epochz: unknown key"),
    (["training.epochz=3"], "training.epochz: unknown key"),
    (["signals.bogus=1"], "signals.bogus: unknown key"),
    (["signals.sampling.temperture=0.5"], "signals.sampling.temperture: unknown key"),
    (["attacks=[{name: loss}, {name: leaky, slope: 0.1}]"], "attacks[1].slope: unknown key"),
    (["attacks=[{name: leaky, params: {slop: 0.1}}]"], "attacks[0].params.slop"),
    (["metrics.bogus=1"], "metrics.bogus: unknown key"),
    ([AUDIT + ", bogus: 1}"], "audit.bogus: unknown key"),
    # wrong types
    (["training.epochs=abc"], "training.epochs"),
    (["plan.n_students=[1]"], "plan.n_students"),
    (["signals.sampling.n_per_record=many"], "signals.sampling.n_per_record"),
    (["signals.share_prefix=maybe"], "signals.share_prefix: Input should be a valid boolean"),
    (["signals.share_prefix=2"], "signals.share_prefix: Input should be a valid boolean"),
    (["signals.share_prefill=[true]"], "signals.share_prefill: Input should be a valid boolean"),
    (["signals.share_prefill=0.5"], "signals.share_prefill: Input should be a valid boolean"),
    (["data.domains.math=3"], "data.domains.math"),
    (["teacher.prep.lora_target_modules=7"], "teacher.prep.lora_target_modules"),
    ([AUDIT + ", n_references: four}"], "audit.n_references"),
    # out of range (checked by the sections' own __post_init__)
    (["training.learning_rate=0"], "training.learning_rate"),
    (["training.topk=5"], "training.topk"),
    (["teacher.prep.micro_batch_size=0"], "teacher.prep.micro_batch_size"),
    (["signals.sampling.top_p=1.5"], "signals.sampling.top_p"),
    (["signals.sampling.seed=-1"], "signals.sampling.seed"),
    (["signals.vllm_stats_topk=0"], "signals.vllm_stats_topk"),
    (["data.max_prompt_tokens=0"], "data.max_prompt_tokens"),
    (["metrics.seed=-1"], "metrics.seed"),
    ([AUDIT + ", n_references: 0}"], "audit.n_references"),
    (["audit={target: '', candidates: c.jsonl}"], "audit.target"),
    (["audit={target: some/model}"], "audit.candidates: required"),
    # attacks: registry names, params' range checks, labels
    (["attacks=[{name: nosuch}]"], "attacks[0].name: unknown attack 'nosuch'"),
    (["attacks=[{name: loss}, {name: leaky, params: {slope: -0.5}}]"], "attacks[1].params.slope"),
    (["attacks=[{name: leaky}, {name: leaky, params: {slope: 0.5}}]"], "attacks[1]: label 'leaky'"),
    (["attacks=[{name: loss, label: x}, {name: min_k, label: x}]"], "attacks[1]: label 'x'"),
    # data sources: names checked, nothing loaded
    (["data.domains.math.source=nosuch"], "data.domains.math.source: unknown data source 'nosuch'"),
    (["data.domains.math.options=[1]"], "data.domains.math.options"),
    # --set itself
    (["name=!!python/object/apply:os.system [echo pwned]"], "--set 'name=!!python/object/apply"),
    (["plan.n_students=[1, 2"], "--set 'plan.n_students=[1, 2'"),
    (["name.sub=1"], "--set 'name.sub=1': name is not a mapping"),
    # derived seeds
    (["training.seed=1"], "training.seed is derived per student"),
]


@pytest.mark.parametrize("overrides,where", CASES, ids=[c[0][0][:48] for c in CASES])
def test_bad_config_is_a_config_error_naming_the_location(overrides, where):
    with pytest.raises(ConfigError) as err:
        load_config(preset="tiny", overrides=overrides)
    assert where in str(err.value)
    assert "\n" not in str(err.value)  # one line for the CLI's `error: ...`


def test_every_error_is_listed_at_once():
    with pytest.raises(ConfigError) as err:
        load_config(preset="tiny", overrides=["training.epochz=3", "signals.sampling.top_p=2", "plan.foo=1"])
    msg = str(err.value)
    assert "3 problems" in msg
    for where in ("training.epochz", "signals.sampling.top_p", "plan.foo"):
        assert where in msg


def test_a_python_tag_in_set_is_never_constructed(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match="not plain YAML"):
        load_config(preset="tiny", overrides=[f"name=!!python/object/apply:os.system ['touch {marker}']"])
    assert not marker.exists()


def test_bad_keys_in_a_config_file_name_their_location(tmp_path):
    f = tmp_path / "study.yaml"
    f.write_text("preset: tiny\ndata:\n  domains:\n    code: {source: humaneval, options: {split: test}}\n")
    with pytest.raises(ConfigError, match=re.escape("data.domains.code.options.split: unknown option")):
        load_config(f)
    f.write_text("preset: tiny\nsignals: {sampling: {n_per_record: 2, temprature: 1.0}}\n")
    with pytest.raises(ConfigError, match=re.escape("signals.sampling.temprature: unknown key")):
        load_config(f)
    f.write_text("- just\n- a list\n")
    with pytest.raises(InputError, match="study.yaml"):
        load_config(f)


def test_consumers_refuse_a_seed_left_null(tmp_path):
    """None means "derived by the study from its master seed": a trainer or sampler given None refuses it."""
    from leakaudit.signals.sampler import row_seed
    from shadow_models import OPDConfig, TeacherPrepConfig, prepare_teacher, train_student

    with pytest.raises(ConfigError, match="OPDConfig.seed"):
        train_student("no-such-model", [], tmp_path / "s", OPDConfig(), progress=False)
    with pytest.raises(ConfigError, match="TeacherPrepConfig.seed"):
        prepare_teacher("no-such-model", [], tmp_path / "t", TeacherPrepConfig(), progress=False)
    with pytest.raises(ConfigError, match="SamplingConfig.seed"):
        row_seed(None, [1, 2], 0)
    assert not (tmp_path / "s").exists() and not (tmp_path / "t").exists()


def test_run_study_with_a_bad_key_exits_2_and_writes_nothing(tmp_path, capsys):
    from leakaudit.cli import main

    out_root = tmp_path / "runs"
    code = main(["run-study", "--preset", "tiny", "--set", "training.epochz=3", "--set", f"out_root={out_root}"])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "training.epochz" in lines[0]
    assert not out_root.exists() or not any(out_root.rglob("*"))
