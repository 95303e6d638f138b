"""The vLLM backend against a stand-in `vllm` (tests/fake_vllm.py) that records what it is given.

open_backend("vllm", ...) is called with the options a study passes (score_batch_size, autocast_bf16, the
vocabulary-statistics top-k, trust_remote_code): vllm.LLM must get none of the transformers-only options, and
scoring with vocab_stats must ask vLLM for prompt log-probs over the whole vocabulary (or the configured k).
"""

from __future__ import annotations

import numpy as np
import pytest
from fake_vllm import fake_vllm  # noqa: F401  (the fixture)

from leakaudit.errors import ConfigError, InputError
from leakaudit.signals.backend import SamplingConfig, backend_options, open_backend

TRANSFORMERS_ONLY = {"score_batch_size", "autocast_bf16", "sample_bf16", "max_batch_tokens", "head_chunk",
                     "device", "share_prefix", "share_prefill"}

# What the study passes (study.py `_backend`): the signals section's settings, whatever the backend.
STUDY_OPTIONS = dict(score_batch_size=32, autocast_bf16=True, trust_remote_code=False, share_prefix=True,
                     share_prefill=True)


def _prompts(tokenizer):
    return [tokenizer("Compute 2 + 3.")["input_ids"], tokenizer("What is 7 times 5?")["input_ids"]]


def test_llm_gets_no_transformers_only_options(fake_vllm, tiny_model_dir):
    with open_backend("vllm", tiny_model_dir, **STUDY_OPTIONS):
        pass
    (llm,) = fake_vllm.llms
    assert not TRANSFORMERS_ONLY & set(llm.kwargs), llm.kwargs
    assert llm.kwargs["model"] == tiny_model_dir
    assert llm.kwargs["trust_remote_code"] is False
    assert llm.kwargs["max_logprobs"] == -1  # the default vllm_stats_topk=-1 needs the whole vocabulary
    assert llm.kwargs["load_format"] == "safetensors"


def test_trust_remote_code_reaches_vllm(fake_vllm, tiny_model_dir):
    with open_backend("vllm", tiny_model_dir, **{**STUDY_OPTIONS, "trust_remote_code": True}):
        pass
    assert fake_vllm.llms[0].kwargs["trust_remote_code"] is True


def test_sampling_params_follow_the_sampling_config(fake_vllm, tiny_model_dir, tokenizer):
    from leakaudit.signals.sampler import row_seed

    cfg = SamplingConfig(n_per_record=3, temperature=0.7, top_p=0.9, max_new_tokens=5, seed=11)
    prompts = _prompts(tokenizer)
    with open_backend("vllm", tiny_model_dir, **STUDY_OPTIONS) as backend:
        out = backend.sample(prompts, cfg)
        again = backend.sample(prompts, cfg)
    assert out == again  # per-request seeds
    assert len(out) == 2 and all(len(per) == 3 for per in out)
    assert all(1 <= len(c) <= 5 for per in out for c in per)
    sent = fake_vllm.sampling_params[:2]
    for p, prompt in zip(sent, prompts):
        assert (p.n, p.temperature, p.top_p, p.max_tokens) == (3, 0.7, 0.9, 5)
        assert p.seed == row_seed(11, prompt, 0) % (2**31)
        assert p.prompt_logprobs is None
        assert list(p.stop_token_ids) == [tokenizer.eos_token_id]
    prompts_sent, _ = fake_vllm.llms[0].generate_calls[0]
    assert [p["prompt_token_ids"] for p in prompts_sent] == prompts


@pytest.mark.parametrize("topk", [-1, 5])
def test_scoring_with_vocab_stats_asks_for_the_configured_logprobs(fake_vllm, tiny_model_dir, tokenizer, topk):
    prefixes = _prompts(tokenizer)
    conts = [tokenizer(" 5")["input_ids"] + [tokenizer.eos_token_id], tokenizer(" 35 it is")["input_ids"]]
    with open_backend("vllm", tiny_model_dir, **STUDY_OPTIONS, vllm_stats_topk=topk) as backend:
        plain = backend.score(prefixes, conts)
        stats = backend.score(prefixes, conts, vocab_stats=True)
    assert [p.prompt_logprobs for p in fake_vllm.sampling_params] == [0, topk]
    assert all(p.max_tokens == 1 for p in fake_vllm.sampling_params)
    assert fake_vllm.llms[0].kwargs["max_logprobs"] == (-1 if topk == -1 else 20)
    assert all(s.mu is None for s in plain)
    assert all(s.mu is not None and s.sigma is not None and s.mu.shape == s.logp.shape for s in stats)
    for a, b in zip(plain, stats):
        np.testing.assert_allclose(a.logp, b.logp, rtol=1e-6)


def test_vllm_scores_match_the_transformers_backend(fake_vllm, tiny_model_dir, tokenizer):
    """Same checkpoint, both backends: identical per-token log-probs and (whole-vocabulary) Min-K%++ statistics."""
    prefixes = _prompts(tokenizer)
    conts = [tokenizer(" 5")["input_ids"], tokenizer(" 35")["input_ids"]]
    with open_backend("vllm", tiny_model_dir, **STUDY_OPTIONS) as v:
        got = v.score(prefixes, conts, vocab_stats=True)
    with open_backend("transformers", tiny_model_dir, score_batch_size=4) as t:
        want = t.score(prefixes, conts, vocab_stats=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logp, w.logp, atol=1e-4)
        np.testing.assert_allclose(g.mu, w.mu, atol=1e-3)
        np.testing.assert_allclose(g.sigma, w.sigma, atol=1e-3)


def test_stats_topk_zero_refuses_vocab_stats(fake_vllm, tiny_model_dir, tokenizer):
    with open_backend("vllm", tiny_model_dir, vllm_stats_topk=0) as backend:
        with pytest.raises(ConfigError, match="stats_topk"):
            backend.score(_prompts(tokenizer), [[1], [2]], vocab_stats=True)


def test_bad_stats_topk_is_refused_before_vllm_starts(fake_vllm, tiny_model_dir):
    with pytest.raises(ConfigError, match="stats_topk"):
        with open_backend("vllm", tiny_model_dir, vllm_stats_topk=-2):
            pass
    assert not fake_vllm.llms


def test_vllm_refuses_pickled_weights_and_lora_adapters(fake_vllm, tmp_path, tiny_model_dir):
    import shutil

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for f in __import__("pathlib").Path(tiny_model_dir).iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, pickled / f.name)
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(InputError, match="weights in safetensors only"):
        with open_backend("vllm", str(pickled)):
            pass
    adapter = tmp_path / "adapter"
    shutil.copytree(tiny_model_dir, adapter)
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match="LoRA adapter"):
        with open_backend("vllm", str(adapter)):
            pass
    assert not fake_vllm.llms


def test_each_backend_gets_only_its_options():
    assert backend_options("transformers", score_batch_size=8, autocast_bf16=True, vllm_stats_topk=5) == {
        "score_batch_size": 8, "autocast_bf16": True, "share_prefix": True, "share_prefill": False}
    assert backend_options("transformers", share_prefix=False, share_prefill=True) == {
        "score_batch_size": 16, "autocast_bf16": False, "share_prefix": False, "share_prefill": True}
    # vLLM: share_prefix / share_prefill are ignored, not refused (see backend_options)
    assert backend_options("vllm", score_batch_size=8, autocast_bf16=True, vllm_stats_topk=5, share_prefix=True,
                           share_prefill=True) == {"stats_topk": 5}
    with pytest.raises(ConfigError, match="share_prefix"):
        backend_options("transformers", share_prefix="yes")
    with pytest.raises(ConfigError):
        backend_options("onnx")


def test_the_fake_refuses_what_vllm_refuses(fake_vllm, tiny_model_dir):
    """The stand-in is strict where vLLM is: unknown engine arguments and sampling keywords are TypeErrors."""
    with pytest.raises(TypeError, match="score_batch_size"):
        fake_vllm.LLM(model=tiny_model_dir, score_batch_size=16)
    with pytest.raises(TypeError):
        fake_vllm.SamplingParams(max_new_tokens=4)


@pytest.fixture
def trainers_imported():
    """TRL probes importlib.util.find_spec("vllm") at import; import it (through the trainers) before the
    stand-in is installed, as on a machine whose TRL was imported without vLLM."""
    import shadow_models.teacher_prep  # noqa: F401
    import shadow_models.trainer  # noqa: F401


@pytest.mark.heavy
def test_tiny_study_end_to_end_on_the_vllm_backend(trainers_imported, fake_vllm, tiny_model_dir, tmp_path):
    """`--set signals.backend=vllm` through every stage: each model is opened as vllm.LLM with engine arguments
    only, fresh trajectories are sampled and every signal is scored through it, and the study finishes."""
    import pandas as pd

    from leakaudit.config import load_config
    from leakaudit.study import Study

    cfg = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}",
                                                "name=vllm", "signals.backend=vllm", "signals.vllm_stats_topk=4"])
    root = Study(cfg, progress=False, log=lambda m: None).run_all()
    scores = pd.read_parquet(root / "scores.parquet")
    assert set(scores.target) == {"math-s0", "math-s1", "math-s2", "math-s3", "math-null"}
    assert (root / "report.html").is_file()
    opened = [llm.kwargs for llm in fake_vllm.llms]
    # each of the 5 targets to sample; base, 4 students and null to score; the teacher once more, for the teacher
    # stage's literalness scores (leakaudit.literalness)
    assert len(opened) == 5 + 6 + 1
    for kwargs in opened:
        assert not {"score_batch_size", "autocast_bf16"} & set(kwargs)
        assert kwargs.get("trust_remote_code", False) is False
    asked = [p.kwargs for p in fake_vllm.sampling_params]
    assert any(k.get("prompt_logprobs") == 4 for k in asked)  # Min-K%++ statistics from the configured top k
    sampled = [k for k in asked if k.get("n") == cfg.signals.sampling.n_per_record]
    assert sampled and all(k["temperature"] == 1.0 and k["top_p"] == 1.0 and k["max_tokens"] == 8 for k in sampled)
