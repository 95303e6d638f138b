"""bf16_autocast 'auto': bf16 where native on the training device, fp32 where emulated (leakaudit.precision).

Found on an AVX2-only AMD EPYC (no avx512_bf16 / amx_bf16): bf16 matmuls there run at 1.3 GFLOP/s against 76 in
fp32, and the presets' `bf16_autocast: true` trained every student in emulated bf16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from leakaudit.config import load_config
from leakaudit.errors import ConfigError
from leakaudit.precision import AUTO, resolve_bf16, resolve_study_precision
from shadow_models import OPDConfig, TeacherPrepConfig, train_student

CPU = torch.device("cpu")


def _native(monkeypatch, value: bool) -> None:
    """Pretend this machine's devices have (or lack) native bf16: the one probe every resolution reads."""
    monkeypatch.setattr("leakaudit.precision.bf16_is_native", lambda device: value)


def test_resolve_bf16_follows_the_device_only_for_auto(monkeypatch):
    _native(monkeypatch, False)
    assert resolve_bf16(AUTO, CPU) is False
    assert resolve_bf16(True, CPU) is True            # asked for by hand: kept even where emulated
    assert resolve_bf16(AUTO, CPU, native=True) is True  # the caller knows (a Ray GPU job)
    _native(monkeypatch, True)
    assert resolve_bf16(AUTO, CPU) is True
    assert resolve_bf16(False, CPU) is False
    with pytest.raises(ValueError, match="bf16_autocast"):
        resolve_bf16("yes", CPU)


@pytest.mark.parametrize("cls", [OPDConfig, TeacherPrepConfig])
def test_trainer_configs_take_auto_and_refuse_other_strings(cls):
    assert cls().bf16_autocast == AUTO
    assert cls(bf16_autocast=False).bf16_autocast is False
    with pytest.raises(ConfigError, match="bf16_autocast='on'"):
        cls(bf16_autocast="on")


def test_a_bad_setting_in_a_study_config_names_its_key():
    with pytest.raises(ConfigError, match="bf16_autocast"):
        load_config(preset="default", overrides=["training.bf16_autocast=sometimes"])


@pytest.mark.parametrize("preset", ["default", "quick", "cpu-full"])
def test_presets_resolve_to_fp32_where_bf16_is_emulated(monkeypatch, preset):
    _native(monkeypatch, False)
    cfg, record = resolve_study_precision(load_config(preset=preset))
    assert cfg.training.bf16_autocast is False and cfg.teacher.prep.bf16_autocast is False
    assert record["training"] == {"setting": AUTO, "device": "cpu", "bf16_native": False, "bf16_autocast": False}
    assert record["teacher_prep"]["bf16_autocast"] is False


def test_where_bf16_is_native_auto_keeps_the_hash_of_runs_made_before_it(monkeypatch):
    """A run made when the presets said `bf16_autocast: true` (and teacher.prep defaulted to true) resumes."""
    _native(monkeypatch, True)
    resolved, _ = resolve_study_precision(load_config(preset="default"))
    before = load_config(preset="default", overrides=["training.bf16_autocast=true",
                                                       "teacher.prep.bf16_autocast=true"])
    assert resolved.training.bf16_autocast is True and resolved.teacher.prep.bf16_autocast is True
    assert resolved.hash() == before.hash()


def test_ray_gpu_students_take_bf16_while_the_cpu_driver_prepares_the_teacher_in_fp32(monkeypatch):
    _native(monkeypatch, False)  # the driver's CPU emulates bf16
    cfg = load_config(preset="default", overrides=["execution.backend=ray", "execution.gpus_per_student=1"])
    resolved, record = resolve_study_precision(cfg)
    assert resolved.training.bf16_autocast is True and record["training"]["device"] == "cuda"
    assert resolved.teacher.prep.bf16_autocast is False and record["teacher_prep"]["device"] == "cpu"


def test_explicit_settings_are_left_alone(monkeypatch):
    _native(monkeypatch, False)
    cfg = load_config(preset="default", overrides=["training.bf16_autocast=true"])
    resolved, _ = resolve_study_precision(cfg)
    assert resolved.training.bf16_autocast is True and resolved.teacher.prep.bf16_autocast is False


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_a_run_started_in_bf16_is_not_continued_in_fp32(monkeypatch, tmp_path, tiny_model_dir):
    """The study resolves 'auto' before hashing: on a machine where it resolves otherwise, the run directory is
    refused with exit-2's ConfigError naming the key and the flag that goes on as started; nothing is written."""
    from leakaudit.study import Study

    cfg = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "name=r",
                                                "training.bf16_autocast=auto"])
    _native(monkeypatch, True)
    first = Study(cfg, progress=False, log=lambda m: None)
    first.prepare()
    first._write_header()
    root = first.run.root
    assert "bf16_autocast: true" in (root / "study.yaml").read_text()
    assert json.loads((root / "env.json").read_text())["precision"]["training"]["bf16_autocast"] is True
    before = _listing(root)

    _native(monkeypatch, False)
    with pytest.raises(ConfigError, match=r"training.bf16_autocast was true there, is false here.*"
                                          r"--set training.bf16_autocast=true.*teacher.prep.bf16_autocast was true"):
        Study(cfg, progress=False, log=lambda m: None).prepare()
    assert _listing(root) == before
    # ... and goes on as started when told to
    again = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "name=r",
                                                  "training.bf16_autocast=true", "teacher.prep.bf16_autocast=true"])
    Study(again, progress=False, log=lambda m: None).prepare()


def test_the_trainer_resolves_auto_and_records_what_it_ran(monkeypatch, tmp_path, tiny_model_dir):
    from leakaudit.data.records import Record

    _native(monkeypatch, False)
    records = [Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}.", source="test")
               for a, b in [(2, 3), (4, 1)]]
    cfg = OPDConfig(batch_size=2, epochs=1, max_new_tokens=3, learning_rate=1e-2, seed=0, bf16_autocast=AUTO)
    out = train_student(tiny_model_dir, records, tmp_path / "s", cfg, model_id="s", progress=False)
    assert json.loads((out / "meta.json").read_text())["config"]["bf16_autocast"] is False
