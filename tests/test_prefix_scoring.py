"""Prefix-shared scoring (HFOptions.share_prefix) equals per-sequence scoring; device resolution; bf16 body."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
import torch

from leakaudit.signals.hf_backend import HFBackend, HFOptions, prefix_batches, resolve_device

FP32 = MappingProxyType({"autocast_bf16": False, "sample_bf16": False, "device": "cpu"})




def _grouped_inputs(seed=0):
    """5 prefixes of lengths 1..17, 1-5 continuations each of lengths 1..13 (several of length 1), shuffled,
    plus two rows whose prefix occurs once (they take the plain path)."""
    rng = np.random.default_rng(seed)
    prefixes, conts = [], []
    for plen, n in [(1, 3), (4, 5), (9, 2), (17, 4), (6, 1)]:
        p = rng.integers(3, 5000, size=plen).tolist()
        for k in range(n):
            clen = 1 if k == 0 else int(rng.integers(1, 14))
            prefixes.append(p)
            conts.append(rng.integers(3, 5000, size=clen).tolist())
    prefixes.append(rng.integers(3, 5000, size=5).tolist())
    conts.append(rng.integers(3, 5000, size=7).tolist())
    perm = rng.permutation(len(prefixes))
    return [prefixes[i] for i in perm], [conts[i] for i in perm]


def _max_diffs(a, b):
    out = {"logp": 0.0, "mu": 0.0, "sigma": 0.0}
    for x, y in zip(a, b):
        assert x.logp.shape == y.logp.shape
        for k in out:
            if getattr(x, k) is not None and len(x.logp):
                out[k] = max(out[k], float(np.abs(getattr(x, k) - getattr(y, k)).max()))
    return out


@pytest.mark.parametrize("opts", [
    {"score_batch_size": 16},  # batches span groups
    {"score_batch_size": 3},  # groups split across batches, batches span groups
    {"score_batch_size": 1},  # one row per batch
    {"score_batch_size": 8, "max_batch_tokens": 40, "head_chunk": 5},  # token-bounded batches, chunked head
])
def test_prefix_shared_scores_equal_per_sequence(peaked_model, opts):
    prefixes, conts = _grouped_inputs()
    plain = HFBackend.from_model(peaked_model, **FP32, score_batch_size=1, share_prefix=False)
    shared = HFBackend.from_model(peaked_model, **FP32, share_prefix=True, **opts)
    for vocab_stats in (False, True):
        a = plain.score(prefixes, conts, vocab_stats=vocab_stats)
        b = shared.score(prefixes, conts, vocab_stats=vocab_stats)
        d = _max_diffs(a, b)
        assert max(d.values()) < 1e-5, d
        assert all((x.mu is None) == (not vocab_stats) for x in b)


def test_prefix_shared_path_is_taken_and_batches_cover(peaked_model, monkeypatch):
    prefixes, conts = _grouped_inputs(seed=1)
    shared = HFBackend.from_model(peaked_model, **FP32, share_prefix=True, score_batch_size=4)
    calls = []
    orig = shared._score_shared_batch
    monkeypatch.setattr(shared, "_score_shared_batch", lambda p, c, v: calls.append(len(p)) or orig(p, c, v))
    shared.score(prefixes, conts)
    assert sum(calls) == len(prefixes) - 2  # the two rows with a prefix of their own take the plain path
    # empty continuations mixed in are still empty
    out = shared.score([prefixes[0], prefixes[0], prefixes[0]], [[], conts[0], [5]], vocab_stats=True)
    assert out[0].logp.shape == (0,) and out[1].logp.shape == (len(conts[0]),) and out[2].logp.shape == (1,)


def test_prefix_batches_cover_and_respect_bounds():
    rng = np.random.default_rng(0)
    plens = rng.integers(1, 30, size=40).tolist()
    keys = [(p, int(rng.integers(0, 2))) for p in plens]
    clens = rng.integers(1, 20, size=40).tolist()
    batches = prefix_batches(plens, clens, keys, max_rows=5, max_tokens=120)
    assert sorted(i for b in batches for i in b) == list(range(40))
    for b in batches:
        assert len(b) <= 5
        assert len(b) == 1 or len(b) * (max(plens[i] for i in b) + max(clens[i] for i in b)) <= 120


def test_device_auto_resolution(monkeypatch):
    assert HFOptions().device == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda:1") == "cuda:1"


def test_default_device_is_cpu_without_cuda(peaked_model, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    backend = HFBackend.from_model(peaked_model, autocast_bf16=False, sample_bf16=False)
    assert backend.device == torch.device("cpu")


def test_shared_prefill_sampling_equals_generate_and_keeps_the_contract(peaked_model):
    from leakaudit.signals import SamplingConfig

    prompts = [[1, 5, 9, 200], [1, 77], [1, 3, 4, 5, 6, 7, 8, 9], [1, 77]]  # a repeated prompt across records
    cfg = SamplingConfig(n_per_record=3, max_new_tokens=7, seed=11, batch_size=5, temperature=0.8, top_p=0.9)
    gen = HFBackend.from_model(peaked_model, **FP32)
    shared = HFBackend.from_model(peaked_model, **FP32, share_prefill=True)
    a = shared.sample(prompts, cfg)
    assert a == gen.sample(prompts, cfg)  # same tokens as the model.generate path
    assert a == shared.sample(prompts, cfg)
    assert a == shared.sample(prompts, SamplingConfig(**{**cfg.to_dict(), "batch_size": 1}))
    assert a == shared.sample(prompts, SamplingConfig(**{**cfg.to_dict(), "batch_size": 12}))
    assert a[2] == shared.sample([prompts[2]], cfg)[0]  # independent of the other prompts
    assert a[1] == a[3]  # a function of (seed, prompt ids, j) only
    assert len({tuple(t) for t in a[0]}) > 1
    assert a != shared.sample(prompts, SamplingConfig(**{**cfg.to_dict(), "seed": 12}))
    bf = HFBackend.from_model(peaked_model, device="cpu", sample_bf16=True, share_prefill=True)
    assert bf.sample(prompts, cfg) == bf.sample(prompts, cfg)  # bf16: deterministic per batch size


def test_shared_prefill_sampling_stops_at_eos(peaked_model):
    from leakaudit.signals import SamplingConfig
    from leakaudit.signals.sampler import trim_completion

    prompts = [[1, 5, 9, 200], [1, 77]]
    cfg = SamplingConfig(n_per_record=2, max_new_tokens=8, seed=3)
    free = HFBackend.from_model(peaked_model, **FP32, eos_token_ids=[0], share_prefill=True).sample(prompts, cfg)
    assert all(len(t) == 8 for per in free for t in per)
    eos = free[0][0][3]
    stopped = HFBackend.from_model(peaked_model, **FP32, eos_token_ids=[eos], share_prefill=True).sample(prompts, cfg)
    plain = HFBackend.from_model(peaked_model, **FP32, eos_token_ids=[eos]).sample(prompts, cfg)
    assert stopped == plain
    for per_free, per_stop in zip(free, stopped):
        for f, s in zip(per_free, per_stop):
            assert s == trim_completion(f, [eos])
    assert stopped[0][0][-1] == eos and len(stopped[0][0]) <= 4


SHARE_PREFIX_TOL = 1e-5
"""share_prefix on vs off, fp32, on the tiny model: max abs difference of logp, mu and sigma (smollm2-135m:
2.5e-5 nats, bench/results/signals_prefix.json, as large as plain batched vs one-by-one)."""


def test_share_prefix_is_on_by_default_and_scores_as_the_plain_path(peaked_model, monkeypatch):
    prefixes, conts = _grouped_inputs(seed=2)
    assert HFOptions().share_prefix is True
    default = HFBackend.from_model(peaked_model, **FP32)
    plain = HFBackend.from_model(peaked_model, **FP32, share_prefix=False)
    calls = []
    orig = default._score_shared_batch
    monkeypatch.setattr(default, "_score_shared_batch", lambda p, c, v: calls.append(len(p)) or orig(p, c, v))
    for vocab_stats in (False, True):
        d = _max_diffs(plain.score(prefixes, conts, vocab_stats=vocab_stats),
                       default.score(prefixes, conts, vocab_stats=vocab_stats))
        assert max(d.values()) < SHARE_PREFIX_TOL, d
    assert sum(calls) == 2 * (len(prefixes) - 2)  # the default took the shared path for every repeated prefix
