"""Study config: presets resolve, overrides apply, bad values name the key."""

import json

import pytest
import yaml

from leakaudit.config import PRESETS, apply_set, dump_config, load_config
from leakaudit.errors import ConfigError, InputError


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_resolve(preset):
    cfg = load_config(preset=preset)
    assert cfg.plan.n_students % 2 == 0
    assert cfg.data.domains
    # the dump round-trips through safe_load into an identical config
    again = load_config(preset=preset, overrides=())
    assert again.hash() == cfg.hash()
    assert yaml.safe_load(dump_config(cfg))["plan"]["n_students"] == cfg.plan.n_students


def test_default_study_is_offline():
    cfg = load_config()
    assert cfg.base_model == "smollm2-135m"
    assert {s.source for s in cfg.data.domains.values()} <= {"champ", "medical", "humaneval"}


def test_set_overrides_and_hash_changes():
    a = load_config()
    b = load_config(overrides=["plan.n_students=6", "training.epochs=3", "name=x"])
    assert b.plan.n_students == 6 and b.training.epochs == 3 and b.name == "x"
    assert a.hash() != b.hash()
    assert apply_set({"a": {"b": 1}}, "a.c=[1, 2]") == {"a": {"b": 1, "c": [1, 2]}}


def test_bad_values_raise_config_error(tmp_path):
    with pytest.raises(ConfigError, match="n_students"):
        load_config(overrides=["plan.n_students=3"])
    with pytest.raises(ConfigError, match="plan.bogus: unknown key"):
        load_config(overrides=["plan.bogus=1"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(overrides=["plan.n_students"])
    with pytest.raises(ConfigError, match="preset"):
        load_config(preset="nope")
    bad = tmp_path / "study.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(InputError, match="study.yaml"):
        load_config(bad)
    with pytest.raises(InputError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_file_overrides_preset(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("preset: tiny\nname: mine\ndata: {n_candidates: 6}\n")
    cfg = load_config(f)
    assert cfg.name == "mine" and cfg.data.n_candidates == 6 and cfg.data.n_population == 4


def test_default_preset_is_the_protocols_design_on_math():
    """The default study is the design the protocol's runs use (experiments/protocol/design.yaml, every key
    resolved), on math with the copying teacher: it must resolve to that config, name and seed aside, jobs run the
    same way (two local workers), and bf16 is left to `auto` (the design file holds what it resolved to)."""
    from conftest import experiment_script

    protocol = experiment_script("protocol_runs")
    design = load_config(protocol.DESIGN, overrides=["data.domains={math: {source: champ}}", "seed=0", "name=default"])
    default = load_config(preset="default")
    default, design = default.to_dict(), design.to_dict()
    for cfg in (default, design):
        cfg.pop("out_root")
        cfg["training"].pop("bf16_autocast")
        cfg["teacher"]["prep"].pop("bf16_autocast")
    assert default["execution"]["local_workers"] == 2
    assert default == design
    assert default["data"]["n_candidates"] == 48 and default["plan"]["n_offline_references"] == 8


def test_every_study_preset_reads_leaky_against_offline_references_with_48_candidates():
    for preset in ("default", "cpu-full", "gpu-small", "gpu-paper"):
        cfg = load_config(preset=preset)
        assert cfg.plan.n_offline_references >= 8 and cfg.data.n_candidates >= 48, preset


def test_every_sweep_point_is_a_valid_config():
    """Each experiments/sweep_signal.py point resolves on top of preset quick (a mistyped key or value raises
    ConfigError here instead of hours into a sweep), and each point's overrides reach the config it names."""
    from conftest import experiment_script

    sweep = experiment_script("sweep_signal")
    for name, overrides in sweep.POINTS.items():
        cfg = load_config(preset="quick", overrides=[*overrides, f"name={name}"]).to_dict()
        for key, value in dict(o.split("=", 1) for o in overrides).items():  # a later override of a key wins
            got = cfg
            for part in key.split("."):
                got = got[part]
            if not value.startswith("{"):
                assert str(got) == value or float(got) == float(value), (name, key, got)


@pytest.mark.parametrize("preset", ["default", "quick", "cpu-full"])
def test_offline_presets_fit_their_pools(preset, tmp_path):
    """Every offline preset's candidates + population + teacher-only records fit in its sources' pools
    after the token-budget filter (the records stage would stop the study otherwise)."""
    from leakaudit.data.records import read_jsonl
    from leakaudit.study import Study

    cfg = load_config(preset=preset, overrides=[f"out_root={tmp_path}"])
    study = Study(cfg, progress=False, log=lambda m: None)
    study.prepare()  # loads, filters and splits every source in memory (raises if a pool is too small)
    study.run_stage("records")
    per_domain = cfg.data.n_candidates + cfg.data.n_population + cfg.data.n_background + cfg.data.n_reference_records
    assert len(read_jsonl(study.run.records)) == per_domain * len(cfg.data.domains)
    if cfg.data.n_teacher_records:
        assert len(read_jsonl(study.run.teacher_records)) == cfg.data.n_teacher_records * len(cfg.data.domains)
    # the regime's invariants on the preset's own plan: no candidate in any background, reference-only or teacher
    # set; every candidate IN for exactly half the students; one background for every trained model of a domain
    plan, teacher_ids = study.plan(), {r.record_id for r in read_jsonl(study.run.teacher_records)} \
        if cfg.data.n_teacher_records else set()
    for domain in cfg.data.domains:
        cand = set(plan.candidates[domain])
        students = plan.models_of(domain, "student")
        assert len(students) == cfg.plan.n_students
        assert len(plan.models_of(domain, "offline")) == cfg.plan.n_offline_references
        assert not cand & (set(plan.background.get(domain, [])) | teacher_ids)
        for m in plan.models_of(domain, "offline"):
            assert not set(plan.members(m)) & cand
        for rid in cand:
            assert sum(plan.is_member(m, rid) for m in students) == cfg.plan.n_students // 2
        for m in students + plan.models_of(domain, "null") + plan.models_of(domain, "offline"):
            assert set(plan.background.get(domain, [])) <= set(plan.members(m))


def test_a_file_listing_domains_replaces_the_presets_domains(tmp_path):
    f = tmp_path / "study.yaml"
    f.write_text("preset: quick\ndata:\n  domains: {code: {source: humaneval}}\n  n_candidates: 6\n")
    cfg = load_config(f)
    assert list(cfg.data.domains) == ["code"]
    assert cfg.data.n_candidates == 6 and cfg.data.n_population == 8  # other data keys still merge


@pytest.mark.parametrize("preset", PRESETS)
def test_study_yaml_round_trip_spells_out_every_default(preset, tmp_path):
    """study.yaml (dump + the `_meta` block run-study appends) loads back to the identical config and hash;
    every section is typed and written in full (tuples as lists, None as null)."""
    from leakaudit.signals.backend import SamplingConfig
    from shadow_models.config import OPDConfig, TeacherPrepConfig

    cfg = load_config(preset=preset, overrides=["attacks=[{name: leaky, params: {slope: 0.2}}, {name: loss}]"])
    assert isinstance(cfg.training, OPDConfig) and isinstance(cfg.teacher.prep, TeacherPrepConfig)
    assert isinstance(cfg.signals.sampling, SamplingConfig)
    text = dump_config(cfg)
    dumped = yaml.safe_load(text)
    assert dumped["training"]["lora_target_modules"] == list(OPDConfig().lora_target_modules)
    assert dumped["training"]["seed"] is None and "seed" in dumped["signals"]["sampling"]
    assert dumped["teacher"]["prep"]["max_length"] == cfg.teacher.prep.max_length  # spelled out, set or not
    assert dumped["signals"]["vllm_stats_topk"] == -1 and dumped["audit"] is None
    assert dumped["attacks"][0]["params"]["token_aggregation"] == "mean"  # attack defaults spelled out too
    (tmp_path / "study.yaml").write_text(text + f"_meta:\n  config_hash: {cfg.hash()}\n")
    again = load_config(tmp_path / "study.yaml")
    assert again.hash() == cfg.hash() and again == cfg


def test_seeds_are_null_until_the_study_derives_them():
    from leakaudit.config import with_seed

    cfg = load_config(preset="tiny", overrides=["teacher.prep.seed=5"])
    assert cfg.training.seed is None and cfg.signals.sampling.seed is None and cfg.teacher.prep.seed == 5
    assert with_seed(cfg.training, 17).seed == 17 and with_seed(cfg.teacher.prep, 17).seed == 5
    assert with_seed(cfg.signals.sampling, 3).seed == 3


def test_audit_section_is_typed_and_set_through_null():
    cfg = load_config(preset="tiny", overrides=["audit.target=some/model", "audit.candidates=c.jsonl"])
    assert cfg.audit.target == "some/model" and cfg.audit.references == [] and cfg.audit.n_references == 4
    assert cfg.audit.population is None and cfg.audit.records_per_reference == 0


OLD_GPU_PAPER = """
name: gpu-paper
seed: 0
base_model: Qwen/Qwen2.5-0.5B-Instruct
data:
  domains:
    math: {source: gsm8k}
    medical: {source: medqa}
    code: {source: mbpp}
  n_candidates: 128
  n_population: 128
  max_prompt_tokens: 1024
  max_privileged_tokens: 1024
plan:
  n_students: 6
  null_student: true
teacher:
  kind: self
training:
  loss: sampled_rkl
  epochs: 16
  batch_size: 16
  learning_rate: 1.0e-5
  max_new_tokens: 256
  bf16_autocast: true
signals:
  backend: vllm
  sampling: {n_per_record: 16, temperature: 1.0, top_p: 1.0, max_new_tokens: 256}
  score_batch_size: 32
"""
"""The gpu-paper preset before it moved to the measured regime (the golden hash below was computed on it)."""


def _study_hash_on_a_bf16_native_machine(cfg, monkeypatch) -> str:
    """The hash a Study computes for `cfg` where bf16 is native (the machine the golden hashes were made on):
    bf16_autocast 'auto' resolves to true there before hashing (leakaudit.precision)."""
    from leakaudit.precision import resolve_study_precision

    monkeypatch.setattr("leakaudit.precision.bf16_is_native", lambda device: True)
    return resolve_study_precision(cfg)[0].hash()


def test_options_added_later_at_their_neutral_value_keep_the_hash_of_runs_made_before_them(monkeypatch):
    """The regime added data.n_background, data.n_reference_records and plan.n_offline_references; at 0 they compute
    what the code did before, so a run directory made before them still resumes. Golden hashes: the presets' as
    computed at commit 44ff94d (before those keys existed), as a study on a bf16-native machine resolves them."""
    from leakaudit.config import NEUTRAL_DEFAULTS

    from leakaudit.config import validate_config

    # quick as it was then: it has since gained offline references (set back to 0 here, their neutral value)
    quick_then = ["plan.n_offline_references=0", "data.n_reference_records=0"]
    assert [_study_hash_on_a_bf16_native_machine(load_config(preset=p, overrides=o), monkeypatch)
            for p, o in (("tiny", []), ("quick", quick_then))] == ["af1f74a85905", "ae81c5846114"]
    # gpu-paper as it was at 44ff94d (the preset has since moved to the measured regime)
    old_gpu_paper = validate_config({**yaml.safe_load(OLD_GPU_PAPER), "name": "gpu-paper"})
    assert _study_hash_on_a_bf16_native_machine(old_gpu_paper, monkeypatch) == "34fd1d7a7fbf"
    base = load_config(preset="tiny")
    # the API target's audit.* keys exist only in an audit: checked on one, against the hash of the same
    # audit computed at b1649fd (before those keys existed)
    audit = ["audit.target=some/model", "audit.candidates=c.jsonl"]
    assert _study_hash_on_a_bf16_native_machine(load_config(preset="tiny", overrides=audit), monkeypatch) == \
        "0355ed020d03"
    for dotted, neutral in NEUTRAL_DEFAULTS.items():
        if dotted.startswith("audit."):
            got = _study_hash_on_a_bf16_native_machine(
                load_config(preset="tiny", overrides=[*audit, f"{dotted}={json.dumps(neutral)}"]), monkeypatch)
            assert got == "0355ed020d03", dotted
            continue
        assert load_config(preset="tiny", overrides=[f"{dotted}={neutral}"]).hash() == base.hash()
    # at any other value they change it
    assert load_config(preset="tiny", overrides=["data.n_background=2"]).hash() != base.hash()
    assert load_config(preset="tiny", overrides=["data.n_reference_records=2", "plan.n_offline_references=1"]
                       ).hash() != base.hash()
    assert load_config(preset="tiny", overrides=["data.n_reference_records=2"]).hash() != base.hash()
    assert load_config(preset="tiny", overrides=["data.n_population=8", "plan.n_null_students=2"]
                       ).hash() != load_config(preset="tiny", overrides=["data.n_population=8"]).hash()


def test_several_null_students_need_population_and_label_sources():
    """plan.n_null_students is checked with the config, before any file: one label source per null student,
    n_candidates/2 population records each."""
    assert load_config(preset="tiny", overrides=["data.n_population=8", "plan.n_null_students=4"]
                       ).plan.n_null_students == 4
    with pytest.raises(ConfigError, match=r"plan.n_null_students: must be in \[1, n_students = 4\]"):
        load_config(preset="tiny", overrides=["data.n_population=20", "plan.n_null_students=5"])
    with pytest.raises(ConfigError, match="plan.n_null_students"):
        load_config(preset="tiny", overrides=["plan.n_null_students=0"])
    with pytest.raises(ConfigError, match=r"data.n_population: 3 null students .* 6 in all; got 4"):
        load_config(preset="tiny", overrides=["plan.n_null_students=3"])
    # no null student: the count is not read
    assert not load_config(preset="tiny", overrides=["plan.null_student=false", "plan.n_null_students=9"]
                           ).plan.null_student


def test_training_checkpoints_are_left_out_of_the_hash(monkeypatch):
    """Whether students keep checkpoints changes how a run survives a stop, not what it trains (a resumed student
    is the one never stopped: tests/test_shadow_models.py), so turning them on resumes a run made without them."""
    plain = load_config(preset="tiny")
    saving = load_config(preset="tiny", overrides=["training.save_checkpoints=true", "training.checkpoint_every=3"])
    assert saving.training.save_checkpoints and saving.training.checkpoint_every == 3
    assert saving.hash() == plain.hash()
    assert _study_hash_on_a_bf16_native_machine(saving, monkeypatch) == "af1f74a85905"  # the tiny preset's, pinned
    assert saving.training.config_hash() == plain.training.config_hash()
    assert load_config(preset="tiny", overrides=["training.epochs=3"]).hash() != plain.hash()


def test_execution_section_is_validated_and_left_out_of_the_hash(tmp_path, monkeypatch):
    """Where the jobs run does not change what they compute, so `execution` never changes the hash (a run
    directory resumes under either backend, and runs made before the section existed keep theirs)."""
    plain = load_config(preset="tiny")
    assert plain.execution.backend == "local" and plain.execution.address is None
    on_ray = load_config(preset="tiny", overrides=["execution.backend=ray", "execution.address=auto",
                                                   "execution.gpus_per_student=0", "execution.cpus_per_student=4"])
    assert on_ray.execution.backend == "ray" and on_ray.execution.cpus_per_student == 4
    assert on_ray.hash() == plain.hash()
    # the tiny preset's hash before the section existed (its teacher.prep.bf16_autocast is 'auto': as resolved on a
    # bf16-native machine, where that hash was made)
    assert _study_hash_on_a_bf16_native_machine(plain, monkeypatch) == "af1f74a85905"
    path = tmp_path / "study.yaml"
    path.write_text(dump_config(on_ray))
    assert load_config(path).execution == on_ray.execution
    for bad, message in [("execution.backend=slurm", "execution.backend: must be one of local, ray"),
                         ("execution.gpus_per_student=-1", "execution.gpus_per_student: must be >= 0"),
                         ("execution.cpus_per_student=0", "execution.cpus_per_student: must be > 0"),
                         ("execution.max_retries=-2", "execution.max_retries: must be >= 0"),
                         ("execution.jobs_per_worker=-1", "execution.jobs_per_worker: must be >= 0"),
                         ("execution.allocator=tcmalloc", "execution.allocator: must be one of reuse, system"),
                         ("execution.workers=3", "execution.workers: unknown key")]:
        with pytest.raises(ConfigError, match=message):
            load_config(preset="tiny", overrides=[bad])
