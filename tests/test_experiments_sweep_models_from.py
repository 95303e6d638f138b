"""experiments/sweep_signal.py --models-from: a finished run's teacher and students serve a run whose config differs
only in what no model depends on (signals, attacks, metrics, name), and nothing else."""

from __future__ import annotations

import os

import pytest

from conftest import experiment_script
from leakaudit.config import dump_config, load_config


@pytest.fixture(scope="module")
def sweep():
    return experiment_script("sweep_signal")


def _finished_run(tmp_path, overrides):
    """A run directory as a finished run leaves the parts --models-from reads: study.yaml with its hash, models/."""
    cfg = load_config(preset="tiny", overrides=[*overrides, "name=src", f"out_root={tmp_path}"])
    root = cfg.run_dir
    (root / "models" / "code-s0").mkdir(parents=True)
    (root / "models" / "code-s0" / "model.safetensors").write_bytes(b"weights")
    (root / "study.yaml").write_text(dump_config(cfg) + f"_meta:\n  config_hash: '{cfg.hash()}'\n")
    return root, cfg


def _new(tmp_path, overrides):
    return load_config(preset="tiny", overrides=[*overrides, "name=new", f"out_root={tmp_path}"])


def test_signals_only_differences_reuse_the_models_as_hard_links(sweep, tmp_path):
    src, src_cfg = _finished_run(tmp_path, ["seed=2"])
    cfg = _new(tmp_path, ["seed=2", "signals.sampling.n_per_record=16", "metrics.n_boot=50"])
    assert sweep.model_config_differences(src / "study.yaml", cfg) == []
    recorded = sweep.link_models(src, cfg)
    linked = cfg.run_dir / "models" / "code-s0" / "model.safetensors"
    assert linked.read_bytes() == b"weights"
    assert os.stat(linked).st_ino == os.stat(src / "models" / "code-s0" / "model.safetensors").st_ino
    assert recorded == {"models_from": str(src), "models_from_config_hash": src_cfg.hash()}
    # a resumed run keeps the models it has and records the same source
    assert sweep.link_models(src, cfg) == recorded


@pytest.mark.parametrize("change, section", [("seed=3", "seed"), ("training.epochs=5", "training"),
                                             ("training.learning_rate=3.0e-4", "training"), ("data.n_population=6", "data")])
def test_a_difference_any_model_depends_on_is_refused_and_nothing_is_linked(sweep, tmp_path, change, section):
    src, _ = _finished_run(tmp_path, ["seed=2"])
    cfg = _new(tmp_path, ["seed=2", change])
    assert section in sweep.model_config_differences(src / "study.yaml", cfg)
    with pytest.raises(SystemExit, match=section):
        sweep.link_models(src, cfg)
    assert not (cfg.run_dir / "models").exists()


def test_a_key_added_since_the_source_ran_counts_with_its_neutral_default(sweep, tmp_path):
    """plan.n_null_students came after runs that are reused: absent from their study.yaml, it reads as 1."""
    src, _ = _finished_run(tmp_path, ["seed=2"])
    text = (src / "study.yaml").read_text()
    assert "n_null_students: 1\n" in text
    (src / "study.yaml").write_text(text.replace("  n_null_students: 1\n", ""))
    assert sweep.model_config_differences(src / "study.yaml", _new(tmp_path, ["seed=2"])) == []
    assert sweep.model_config_differences(src / "study.yaml",
                                          _new(tmp_path, ["seed=2", "plan.n_null_students=2"])) == ["plan"]


def test_added_offline_references_keep_the_teacher_and_students(sweep, tmp_path):
    src, _ = _finished_run(tmp_path, ["seed=2", "data.n_population=8"])
    cfg = _new(tmp_path, ["seed=2", "data.n_population=8", "plan.n_offline_references=2", "data.n_reference_records=4"])
    assert sweep.model_config_differences(src / "study.yaml", cfg) == []
    # but not together with a change any model depends on
    cfg = _new(tmp_path, ["seed=2", "data.n_population=8", "plan.n_offline_references=2", "data.n_reference_records=4",
                          "training.epochs=2"])
    assert sweep.model_config_differences(src / "study.yaml", cfg) == ["training"]
