"""Bad-input corpus for study configs: everything is checked by `load_config`, before any stage
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


# ---- config files: duplicate keys, empty files, bool vs int, which file (config loading review) ------------------
def test_a_key_given_twice_in_a_config_file_names_the_file_line_and_key(tmp_path):
    f = tmp_path / "study.yaml"
    f.write_text("preset: tiny\nseed: 1\nname: x\nseed: 2\n")
    with pytest.raises(InputError) as err:
        load_config(f)
    msg = str(err.value)
    assert str(f) in msg and "line 4" in msg and "duplicate key 'seed'" in msg and "line 2" in msg
    f.write_text("preset: tiny\nsignals:\n  share_prefix: true\n  score_batch_size: 4\n  share_prefix: false\n")
    with pytest.raises(InputError, match=re.escape(f"{f}, line 5: duplicate key 'share_prefix'")):
        load_config(f)
    # a merge key (<<) may still be overridden: that is not a duplicate
    from leakaudit.yamlio import load_yaml

    assert load_yaml("base: &b {a: 1}\nc:\n  <<: *b\n  a: 2\n") == {"base": {"a": 1}, "c": {"a": 2}}


def test_the_duplicate_key_loader_stays_safe(tmp_path):
    import yaml

    from leakaudit.yamlio import read_yaml

    # values come from yaml.safe_load; the duplicate-key check only composes nodes (yaml.compose, SafeLoader)
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(f"!!python/object/apply:os.system ['touch {tmp_path / 'ran'}']\n")
    marker = tmp_path / "ran"
    f = tmp_path / "study.yaml"
    f.write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(InputError, match=re.escape(str(f))):
        read_yaml(f)
    assert not marker.exists()


def test_run_study_with_a_duplicate_key_exits_2_and_writes_nothing(tmp_path, capsys):
    from leakaudit.cli import main

    out_root = tmp_path / "runs"
    f = tmp_path / "my.yaml"
    f.write_text(f"preset: tiny\nout_root: {out_root}\nseed: 1\nseed: 2\n")
    code = main(["run-study", "--config", str(f)])
    err = capsys.readouterr().err
    assert code == 2 and str(f) in err and "line 4" in err and "'seed'" in err
    assert not out_root.exists()


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n# and another\n", "---\n"])
def test_an_empty_config_file_is_refused(tmp_path, text):
    f = tmp_path / "empty.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(f"{f}: empty config")):
        load_config(f)


@pytest.mark.parametrize("overrides,where", [
    (["seed=true"], "seed: Input should be a valid integer"),
    (["trust_remote_code=1"], "trust_remote_code: Input should be a valid boolean"),
    (["trust_remote_code=0"], "trust_remote_code: Input should be a valid boolean"),
    (["metrics.seed=false"], "metrics.seed: Input should be a valid integer"),
    (["plan.null_student=1"], "plan.null_student: Input should be a valid boolean"),
])
def test_bool_and_int_are_not_interchangeable(overrides, where, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(where)):
        load_config(preset="tiny", overrides=overrides)
    key, value = overrides[0].split("=")
    f = tmp_path / "study.yaml"
    head, _, last = key.rpartition(".")
    f.write_text("preset: tiny\n" + (f"{head}: {{{last}: {value}}}\n" if head else f"{key}: {value}\n"))
    with pytest.raises(ConfigError, match=re.escape(f"{f}: {where}")):
        load_config(f)


def test_ints_and_bools_still_load_from_set_and_files(tmp_path):
    cfg = load_config(preset="tiny", overrides=["seed=3", "trust_remote_code=true", "metrics.seed=2",
                                                "plan.null_student=false", "signals.share_prefix=no"])
    assert (cfg.seed, cfg.trust_remote_code, cfg.metrics.seed) == (3, True, 2)
    assert cfg.plan.null_student is False and cfg.signals.share_prefix is False
    f = tmp_path / "study.yaml"
    f.write_text("preset: tiny\nseed: 5\ntrust_remote_code: false\n")
    assert load_config(f).seed == 5


def test_errors_of_a_config_file_name_the_file_but_set_errors_do_not(tmp_path):
    f = tmp_path / "study.yaml"
    f.write_text("preset: tiny\nbogus: 1\n")
    with pytest.raises(ConfigError, match=re.escape(f"{f}: bogus: unknown key")):
        load_config(f)
    with pytest.raises(ConfigError, match=re.escape(f"{f}: bogus: unknown key")):
        load_config(f, overrides=["seed=1"])
    f.write_text("preset: nosuch\n")
    with pytest.raises(ConfigError, match=re.escape(f"{f}: preset: unknown preset 'nosuch'")):
        load_config(f)
    f.write_text("preset: tiny\nseed: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(f, overrides=["training.epochz=3"])
    assert str(err.value).startswith("training.epochz: unknown key")  # the --set message, unchanged


@pytest.mark.parametrize("bad,where", [("bogus: 1\n", "bogus: unknown key"), ("seed: 0\n", "line")])
def test_pool_names_the_shard_study_yaml_that_is_bad(tmp_path, capsys, bad, where):
    import pandas as pd

    from leakaudit.cli import main
    from leakaudit.config import dump_config, restrict_domains

    full = load_config(preset="tiny")
    domains = list(full.data.domains)
    if len(domains) < 2:
        full = load_config(preset="tiny", overrides=["data.domains={a: {source: champ}, b: {source: champ}}"])
        domains = list(full.data.domains)
    shards = []
    for i, d in enumerate(domains[:2]):
        s = tmp_path / f"s{i + 1}"
        s.mkdir()
        (s / "study.yaml").write_text(dump_config(restrict_domains(full, [d])))
        pd.DataFrame({"domain": [d]}).to_parquet(s / "scores.parquet", index=False)
        shards.append(s)
    with open(shards[1] / "study.yaml", "a", encoding="utf-8") as fh:
        fh.write(bad)  # an unknown key, or a key the file already has
    out = tmp_path / "P"
    code = main(["pool", str(shards[0]), str(shards[1]), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    line = [x for x in err.splitlines() if x.strip()][-1]
    assert str(shards[1] / "study.yaml") in line and where in line
    assert not out.exists() or not any(p for p in out.rglob("*") if not p.name.startswith("."))
