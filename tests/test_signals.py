"""The transformers backend against direct, unbatched computations on a tiny random Llama (fp32)."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
import torch

from leakaudit.errors import ConfigError
from leakaudit.signals import SamplingConfig, make_backend
from leakaudit.padding import left_pad, position_ids
from leakaudit.signals.hf_backend import HFBackend, length_batches
from leakaudit.signals.sampler import row_seed, sample_next, trim_completion

FP32 = MappingProxyType({"autocast_bf16": False, "sample_bf16": False})  # exact fp32 scoring and sampling




@pytest.fixture(scope="module")
def backend(peaked_model):
    return HFBackend.from_model(peaked_model, **FP32, score_batch_size=4)


def _inputs(seed=0, n=7):
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(3, 5000, size=rng.integers(1, 12)).tolist() for _ in range(n)]
    conts = [rng.integers(3, 5000, size=rng.integers(1, 15)).tolist() for _ in range(n)]
    return prefixes, conts


def _full_logsoftmax(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().log_softmax(-1)  # [L, V]


def test_batched_scores_equal_one_by_one(backend):
    prefixes, conts = _inputs()
    batched = backend.score(prefixes, conts, vocab_stats=True)
    single = HFBackend.from_model(backend.model, **FP32, score_batch_size=1)
    for p, c, b in zip(prefixes, conts, batched):
        (one,) = single.score([p], [c], vocab_stats=True)
        assert b.logp.dtype == np.float32 and b.logp.shape == (len(c),)
        np.testing.assert_allclose(b.logp, one.logp, atol=1e-5)
        np.testing.assert_allclose(b.mu, one.mu, atol=1e-5)
        np.testing.assert_allclose(b.sigma, one.sigma, atol=1e-5)


def test_scores_match_direct_forward_and_sum_to_sequence_logprob(backend):
    prefixes, conts = _inputs(seed=1)
    scores = backend.score(prefixes, conts)
    for p, c, s in zip(prefixes, conts, scores):
        ls = _full_logsoftmax(backend.model, p + c)
        direct = np.array([ls[len(p) - 1 + t, c[t]].item() for t in range(len(c))])
        np.testing.assert_allclose(s.logp, direct, atol=1e-5)
        # log p(cont | prefix) of the whole continuation = sum of the per-token terms
        idx = torch.arange(len(p) - 1, len(p) + len(c) - 1)
        seq_logp = ls[idx, torch.tensor(c)].sum().item()
        assert s.logp.sum() == pytest.approx(seq_logp, abs=1e-4)
        assert np.all(s.logp <= 0) and s.logp.std() > 0.1  # a peaked, non-uniform model


def test_padding_and_batch_composition_do_not_change_scores(backend):
    prefix, cont = [5, 17, 300], [42, 7, 99, 1000]
    (alone,) = backend.score([prefix], [cont], vocab_stats=True)
    long_p, long_c = list(range(10, 70)), list(range(100, 140))  # forces ~90 tokens of left padding
    mixed = backend.score([long_p, prefix, [9], prefix], [long_c, cont, [8, 8], cont], vocab_stats=True)
    for s in (mixed[1], mixed[3]):
        np.testing.assert_allclose(s.logp, alone.logp, atol=1e-5)
        np.testing.assert_allclose(s.mu, alone.mu, atol=1e-5)
        np.testing.assert_allclose(s.sigma, alone.sigma, atol=1e-5)
    tight = HFBackend.from_model(backend.model, **FP32, max_batch_tokens=8, head_chunk=3)
    np.testing.assert_allclose(tight.score([prefix], [cont])[0].logp, alone.logp, atol=1e-5)


def test_vocab_stats_equal_brute_force(backend):
    prefixes, conts = _inputs(seed=2, n=4)
    scores = backend.score(prefixes, conts, vocab_stats=True)
    for p, c, s in zip(prefixes, conts, scores):
        ls = _full_logsoftmax(backend.model, p + c).double()[len(p) - 1: len(p) + len(c) - 1]  # [T, V]
        prob = ls.exp()
        mu = (prob * ls).sum(-1)
        sigma = (prob * (ls - mu[:, None]) ** 2).sum(-1).sqrt()
        np.testing.assert_allclose(s.mu, mu.numpy(), atol=1e-4)
        np.testing.assert_allclose(s.sigma, sigma.numpy(), atol=1e-4)
        assert np.all(s.sigma > 0) and np.all(s.mu < 0)


def test_empty_continuation_and_bad_inputs(backend):
    out = backend.score([[1, 2], [3]], [[], [4]], vocab_stats=True)
    assert out[0].logp.shape == (0,) and out[0].mu.shape == (0,) and out[1].logp.shape == (1,)
    with pytest.raises(ValueError):
        backend.score([[]], [[1]])
    with pytest.raises(ValueError):
        backend.score([[1]], [[1], [2]])


def test_sampling_reproducible_and_batch_invariant(backend):
    prompts = [[1, 5, 9, 200], [1, 77], [1, 3, 4, 5, 6, 7, 8, 9]]
    cfg = SamplingConfig(n_per_record=3, max_new_tokens=6, seed=11, batch_size=4, temperature=0.8, top_p=0.9)
    a = backend.sample(prompts, cfg)
    assert len(a) == 3 and all(len(per) == 3 for per in a)
    assert all(1 <= len(t) <= 6 for per in a for t in per)
    assert a == backend.sample(prompts, cfg)
    assert a == backend.sample(prompts, SamplingConfig(**{**cfg.to_dict(), "batch_size": 1}))
    assert a[1] == backend.sample([prompts[1]], cfg)[0]  # independent of the other prompts
    b = backend.sample(prompts, SamplingConfig(**{**cfg.to_dict(), "seed": 12}))
    assert a != b
    assert len({tuple(t) for t in a[0]}) > 1  # trajectories of one prompt differ


def test_sampling_stops_at_eos_and_keeps_it(peaked_model):
    prompts = [[1, 5, 9, 200], [1, 77]]
    cfg = SamplingConfig(n_per_record=2, max_new_tokens=8, seed=3)
    free = HFBackend.from_model(peaked_model, **FP32, eos_token_ids=[0]).sample(prompts, cfg)
    assert all(len(t) == 8 for per in free for t in per)
    eos = free[0][0][3]  # a token that row (0, 0) emits at step 3: make it the EOS
    stopped = HFBackend.from_model(peaked_model, **FP32, eos_token_ids=[eos]).sample(prompts, cfg)
    for per_free, per_stop in zip(free, stopped):
        for f, s in zip(per_free, per_stop):
            assert s == trim_completion(f, [eos])
    assert stopped[0][0][-1] == eos and len(stopped[0][0]) <= 4


def test_bf16_autocast_scores_close_to_fp32(backend):
    prefixes, conts = _inputs(seed=3, n=3)
    bf = HFBackend.from_model(backend.model, autocast_bf16=True, sample_bf16=True)
    for a, b in zip(backend.score(prefixes, conts), bf.score(prefixes, conts)):
        assert np.max(np.abs(a.logp - b.logp)) < 0.5
    prompts, cfg = prefixes[:2], SamplingConfig(n_per_record=2, max_new_tokens=4, seed=5, batch_size=4)
    assert bf.sample(prompts, cfg) == bf.sample(prompts, cfg)  # bf16 sampling: deterministic per batch size


def test_sample_next_inverse_cdf_and_top_p():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]] * 3))
    u = torch.tensor([0.05, 0.65, 0.75], dtype=torch.float64)
    assert sample_next(logits, u, 1.0, 1.0).tolist() == [0, 1, 2]
    assert sample_next(logits, u, 1.0, 0.6).tolist() == [1, 1, 1]  # only the top token reaches 0.6
    assert sample_next(logits, torch.tensor([0.0, 0.6, 0.9], dtype=torch.float64), 1.0, 0.7).tolist() == [1, 1, 2]
    # temperature -> 0 concentrates on the argmax
    assert sample_next(logits, u, 1e-3, 1.0).tolist() == [1, 1, 1]
    assert sample_next(logits, torch.tensor([1 - 1e-17] * 3, dtype=torch.float64), 1.0, 0.6).tolist() == [1, 1, 1]


def test_sample_next_matches_the_target_distribution():
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.1, 0.0, 0.5, 0.15, 0.25, 0.0, 0.0])
    n = 20000
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    logits = torch.log(probs).expand(n, -1)
    for top_p, expect in ((1.0, probs), (0.8, torch.tensor([0, 0, 0.5, 0.15, 0.25, 0, 0]) / 0.9)):
        freq = torch.bincount(sample_next(logits, u, 1.0, top_p, block=2), minlength=7).double() / n
        assert torch.allclose(freq, expect.double(), atol=0.01)
        assert freq[1] == 0 and freq[5] == 0 and freq[6] == 0


def test_helpers():
    assert trim_completion([4, 5, 2, 2, 2], [2]) == [4, 5, 2]
    assert trim_completion([4, 5], [2]) == [4, 5]
    assert row_seed(0, [1, 2], 0) == row_seed(0, [1, 2], 0) != row_seed(0, [1, 2], 1) != row_seed(1, [1, 2], 1)
    ids, mask = left_pad([[7, 8, 9], [5]], pad_id=0)
    pos = position_ids(mask)
    assert ids.tolist() == [[7, 8, 9], [0, 0, 5]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]
    batches = length_batches([3, 10, 5, 10, 1], max_rows=2, max_tokens=15)
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3, 4]
    assert batches[0] == [1] and all(len(b) <= 2 for b in batches)


def test_config_checks():
    for bad in ({"n_per_record": 0}, {"temperature": 0.0}, {"top_p": 0.0}, {"top_p": 1.5},
                {"max_new_tokens": 0}, {"seed": -1}, {"batch_size": 0}):
        with pytest.raises(ConfigError):
            SamplingConfig(**bad)
    with pytest.raises(ConfigError):
        make_backend("onnx", "x")
    with pytest.raises(ConfigError):
        HFBackend.from_model(torch.nn.Linear(1, 1), score_batch_size=0)
