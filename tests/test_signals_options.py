"""Signals: the study's signals.share_prefix / share_prefill keys reach the backend and the signals stage's
inputs hash; HFOptions refuses wrong types naming the field; bf16 sampling runs on a bf16 copy of the weights."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from leakaudit.config import dump_config, load_config
from leakaudit.errors import ConfigError
from leakaudit.signals import SamplingConfig
from leakaudit.pipeline.targets import open_model_backend
from leakaudit.signals.hf_backend import HFBackend, HFOptions, bf16_copy
from leakaudit.study import Study


def _study_backend(cfg, model_dir):
    """The backend the signals stage opens for a model (ModelTarget.open_backend's call) with `cfg`."""
    return open_model_backend(cfg, model_dir)


@pytest.mark.parametrize("overrides,want", [
    ([], (True, False)),  # the defaults: share_prefix on, share_prefill off
    (["signals.share_prefix=false", "signals.share_prefill=true"], (False, True)),
])
def test_study_signals_keys_reach_hfoptions(tiny_model_dir, overrides, want):
    cfg = load_config(preset="tiny", overrides=overrides)
    assert (cfg.signals.share_prefix, cfg.signals.share_prefill) == want
    with _study_backend(cfg, tiny_model_dir) as backend:
        assert isinstance(backend, HFBackend)
        assert (backend.options.share_prefix, backend.options.share_prefill) == want


@pytest.mark.parametrize("key", ["share_prefix", "share_prefill"])
def test_signals_keys_change_the_config_hash_and_the_signals_stage_inputs(key):
    a = load_config(preset="tiny")
    b = load_config(preset="tiny", overrides=[f"signals.{key}={str(not getattr(a.signals, key)).lower()}"])
    assert a.hash() != b.hash()
    assert f"{key}: " in dump_config(a)  # spelled out in study.yaml

    def inputs(cfg):
        stub = SimpleNamespace(cfg=cfg, external_models=lambda: {}, redact=False, _model_digest=lambda r: r)
        return Study._stage_inputs(stub, "signals", ["upstream-digest"])

    assert inputs(a) != inputs(b)


@pytest.mark.parametrize("field,value", [
    ("share_prefix", "yes"), ("share_prefill", 1), ("autocast_bf16", None), ("sample_bf16", "auto"),
    ("score_batch_size", True),
])
def test_hfoptions_refuse_wrong_types_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        HFOptions(**{field: value})


def test_hfoptions_defaults():
    opts = HFOptions()
    assert opts.share_prefix is True and opts.share_prefill is False and opts.sample_bf16 is None


# ---------------------------------------------------------------- bf16 sampling copy

def test_bf16_copy_is_bf16_tied_and_leaves_the_model_alone(peaked_model):
    before = {n: p.detach().clone() for n, p in peaked_model.named_parameters()}
    c = bf16_copy(peaked_model)
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in c.parameters())
    assert c.get_output_embeddings().weight is c.get_input_embeddings().weight  # tied stays tied
    assert all(b.dtype == torch.float32 for b in c.buffers() if b.is_floating_point())  # rotary inv_freq
    for n, p in peaked_model.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p, before[n])
    ptrs = {p.data_ptr() for p in peaked_model.parameters()}
    assert not ptrs & {p.data_ptr() for p in c.parameters()}
    assert not c.training


def test_bf16_sampling_runs_on_a_copy_made_once_and_scoring_stays_fp32(peaked_model, monkeypatch):
    prompts = [[1, 5, 9, 200], [1, 77], [1, 3, 4, 5, 6, 7, 8, 9]]
    cfg = SamplingConfig(n_per_record=3, max_new_tokens=6, seed=11, batch_size=4, temperature=0.8, top_p=0.9)
    fp32 = HFBackend.from_model(peaked_model, device="cpu", sample_bf16=False)
    bf = HFBackend.from_model(peaked_model, device="cpu", sample_bf16=True)
    scores_before = fp32.score(prompts, [[4, 5, 6]] * 3, vocab_stats=True)

    def refuse(*a, **k):
        raise AssertionError("bf16 sampling must not run the float32 model")

    assert bf._bf16_model is None  # made at the first bf16 sample() (here, before the float32 model is fenced off)
    copy_model, autocast = bf._sampling_model()
    assert copy_model is not peaked_model and autocast is False
    monkeypatch.setattr(peaked_model, "generate", refuse)
    monkeypatch.setattr(peaked_model, "forward", refuse)
    a = bf.sample(prompts, cfg)
    assert all(p.dtype == torch.bfloat16 for p in copy_model.parameters())
    # reproducible: same seed, inputs and batch_size -> same tokens; the copy is made once per backend
    assert a == bf.sample(prompts, cfg) and bf._bf16_model is copy_model
    assert a != bf.sample(prompts, SamplingConfig(**{**cfg.to_dict(), "seed": 12}))
    # the same tokens as sampling that bf16 model directly in "fp32" mode (no autocast, no other cast)
    monkeypatch.undo()
    assert a == HFBackend.from_model(bf16_copy(peaked_model), device="cpu", sample_bf16=False).sample(prompts, cfg)
    # shared-prefill sampling goes through the copy too
    shared = HFBackend.from_model(peaked_model, device="cpu", sample_bf16=True, share_prefill=True)
    shared._sampling_model()
    monkeypatch.setattr(peaked_model, "forward", refuse)
    s = shared.sample(prompts, cfg)
    assert s == shared.sample(prompts, cfg)
    monkeypatch.undo()
    # scoring still runs the float32 model, unchanged by the copy
    for x, y in zip(scores_before, bf.score(prompts, [[4, 5, 6]] * 3, vocab_stats=True)):
        np.testing.assert_allclose(x.logp, y.logp, atol=1e-6)
        np.testing.assert_allclose(x.mu, y.mu, atol=1e-6)
    bf.close()
    assert bf._bf16_model is None


def test_fp32_sampling_makes_no_copy(peaked_model):
    b = HFBackend.from_model(peaked_model, device="cpu", sample_bf16=False)
    b.sample([[1, 5, 9]], SamplingConfig(n_per_record=1, max_new_tokens=2, seed=0))
    assert b._bf16_model is None
