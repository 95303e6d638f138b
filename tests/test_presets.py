"""Every study preset reads Leaky against offline references (its primary, OUT-only reference design), except
`tiny`, the test suite's fixture (its header says why); the long CPU presets keep training checkpoints."""

from __future__ import annotations

import pytest

from leakaudit.config import load_config
from leakaudit.presets import preset_names

FIXTURE_ONLY = {"tiny"}


@pytest.mark.parametrize("preset", [p for p in preset_names() if p not in FIXTURE_ONLY])
def test_every_study_preset_trains_offline_references(preset):
    cfg = load_config(preset=preset)
    assert cfg.plan.n_offline_references >= 2
    # each offline reference draws n_candidates/2 reference-only records, never a candidate
    assert cfg.data.n_reference_records >= cfg.data.n_candidates // 2


def test_the_fixture_preset_is_still_a_preset():
    assert FIXTURE_ONLY <= set(preset_names())


@pytest.mark.parametrize("preset", ["default", "cpu-full"])
def test_the_presets_that_train_for_hours_on_a_cpu_keep_checkpoints(preset):
    """A stopped student of these presets (each trains for tens of minutes on 2 cores) resumes at its last
    checkpoint instead of from scratch; checkpoints are outside the config hash, so this changes no result."""
    cfg = load_config(preset=preset)
    assert cfg.training.save_checkpoints and cfg.training.checkpoint_every <= 10
    assert cfg.hash() == load_config(preset=preset, overrides=["training.save_checkpoints=false"]).hash()
