"""Signal storage round trips, vLLM output conversion on fake objects, and stage resume."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from leakaudit.errors import ConfigError, InputError, LeakauditError
from leakaudit.prompting import reference_text_ids, student_prompt_ids
from leakaudit.signals import (SamplingConfig, TokenScores, load_fixed, load_logp, load_prompts, load_trajectories,
                               make_backend, missing_logp, sample_fresh, save_fixed, save_logp, save_trajectories,
                               score_fixed, score_fresh, score_fresh_all)
from leakaudit.signals.store import logp_path
from leakaudit.signals.vllm_backend import completions_from_outputs, scores_from_prompt_logprobs


# ---------------------------------------------------------------- store
def test_trajectories_and_logp_round_trip_exactly(tmp_path):
    ids = ["r1", "r2", "r3"]
    trajs = [[[5, 6, 2], [7]], [[8, 9, 10, 11], []], [[1], [2, 3]]]
    prompts = [[1, 2], [3], [4, 5, 6]]
    save_trajectories(tmp_path, ids, trajs, {"seed": 3}, prompts=prompts)
    z = np.load(tmp_path / "trajectories.npz", allow_pickle=False)
    assert z["record_id"].dtype.kind == "U" and z["tokens"].dtype == np.int32 and z["offsets"].dtype == np.int64
    assert z["offsets"].tolist() == [0, 3, 4, 8, 8, 9, 11] and z["traj_index"].tolist() == [0, 1, 0, 1, 0, 1]
    got = load_trajectories(tmp_path)
    assert list(got) == ids
    assert {k: [a.tolist() for a in v] for k, v in got.items()} == dict(zip(ids, trajs))
    assert {k: v.tolist() for k, v in load_prompts(tmp_path).items()} == dict(zip(ids, prompts))

    rng = np.random.default_rng(0)
    logp = {rid: [rng.normal(size=len(t)).astype(np.float32) for t in per] for rid, per in zip(ids, trajs)}
    save_logp(tmp_path, "ref_0", logp)
    back = load_logp(tmp_path, "ref_0")
    for rid in ids:
        for a, b in zip(logp[rid], back[rid]):
            assert b.dtype == np.float32 and np.array_equal(a, b)
    assert missing_logp(tmp_path, ["ref_0", "target"]) == ["target"]
    with pytest.raises(ValueError):
        save_logp(tmp_path, "bad", {"r1": [np.zeros(3), np.zeros(2)], "r2": logp["r2"], "r3": logp["r3"]})
    with pytest.raises(InputError):
        save_logp(tmp_path, "../escape", logp)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_fixed_round_trip_with_and_without_stats(tmp_path):
    rng = np.random.default_rng(1)
    tokens = [[4, 5, 6], [7], [8, 9]]
    scores = [TokenScores(rng.normal(size=len(t)), rng.normal(size=len(t)), rng.random(len(t))) for t in tokens]
    save_fixed(tmp_path / "m.npz", ["a", "b", "c"], tokens, scores)
    got = load_fixed(tmp_path / "m.npz")
    assert list(got) == ["a", "b", "c"]
    for t, s, g in zip(tokens, scores, got.values()):
        assert g.tokens.tolist() == t and g.tokens.dtype == np.int32
        assert np.array_equal(g.logp, s.logp) and np.array_equal(g.mu, s.mu) and np.array_equal(g.sigma, s.sigma)
    save_fixed(tmp_path / "n.npz", ["a"], [[1, 2]], [TokenScores(np.array([-1.0, -2.0]))])
    g = load_fixed(tmp_path / "n.npz")["a"]
    assert g.mu is None and g.sigma is None and g.logp.tolist() == [-1.0, -2.0]
    with pytest.raises(ValueError):
        save_fixed(tmp_path / "x.npz", ["a"], [[1, 2]], [TokenScores(np.array([-1.0]))])
    with pytest.raises(InputError):
        load_fixed(tmp_path / "absent.npz")


# ---------------------------------------------------------------- vLLM conversion (no vllm needed)
def _lp(x):
    return SimpleNamespace(logprob=float(x), rank=None, decoded_token=None)


def test_vllm_prompt_logprobs_to_token_scores():
    rng = np.random.default_rng(2)
    vocab = 6
    full = [None] + [np.log(p) for p in rng.dirichlet(np.ones(vocab), size=4)]  # 5 prompt tokens
    prompt_logprobs = [None] + [{v: _lp(row[v]) for v in range(vocab)} for row in full[1:]]
    prefix, cont = [1, 2], [3, 0, 5]
    s = scores_from_prompt_logprobs(prompt_logprobs, len(prefix), cont, vocab_stats=True)
    expect = [full[2 + t][c] for t, c in enumerate(cont)]
    np.testing.assert_allclose(s.logp, expect, rtol=1e-6)
    for t in range(3):
        lp = full[2 + t]
        mu = (np.exp(lp) * lp).sum()
        np.testing.assert_allclose(s.mu[t], mu, rtol=1e-5)
        np.testing.assert_allclose(s.sigma[t], np.sqrt((np.exp(lp) * (lp - mu) ** 2).sum()), rtol=1e-5)
    # only the prompt token itself (prompt_logprobs=0), plain floats accepted
    sparse = [None] + [{tok: float(full[i + 1][tok])} for i, tok in enumerate([2, 3, 0, 5])]
    s2 = scores_from_prompt_logprobs(sparse, 2, cont)
    np.testing.assert_allclose(s2.logp, expect, rtol=1e-6)
    assert s2.mu is None
    with pytest.raises(ValueError):
        scores_from_prompt_logprobs(sparse, 2, [4, 0, 5])  # token 4 absent at position 2
    with pytest.raises(ValueError):
        scores_from_prompt_logprobs(sparse, 0, [1])  # the first prompt token has no log-prob


def test_vllm_outputs_to_completions():
    def req(*outs):
        return SimpleNamespace(outputs=[SimpleNamespace(index=i, token_ids=t) for i, t in outs])

    outputs = [req((1, [7, 8]), (0, [5, 2, 2])), req((0, (9,)), (1, [2]))]
    assert completions_from_outputs(outputs, 2, [2]) == [[[5, 2], [7, 8]], [[9], [2]]]
    with pytest.raises(ValueError):
        completions_from_outputs(outputs, 3, [2])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_backend_without_vllm_is_a_clear_error():
    with pytest.raises(LeakauditError, match="vllm"):
        make_backend("vllm", "smollm2-135m")


# ---------------------------------------------------------------- stages
class CountingBackend:
    """Wraps a backend and counts the sequences it is asked to sample or score."""

    def __init__(self, inner):
        self.inner, self.sampled, self.scored = inner, 0, 0
        self.model_ref = "counting"

    def sample(self, prompts, cfg):
        self.sampled += len(prompts) * cfg.n_per_record
        return self.inner.sample(prompts, cfg)

    def score(self, prefixes, continuations, *, vocab_stats=False):
        self.scored += len(prefixes)
        return self.inner.score(prefixes, continuations, vocab_stats=vocab_stats)


def test_stages_store_what_the_backend_computes_and_resume(tmp_path, tiny_model_dir, tokenizer, sample_records):
    records = sample_records[:3]
    be = CountingBackend(make_backend("transformers", tiny_model_dir, autocast_bf16=False, sample_bf16=False))
    cfg = SamplingConfig(n_per_record=2, max_new_tokens=5, seed=1)
    fresh = tmp_path / "fresh" / "t0"
    assert sample_fresh(be, tokenizer, records, cfg, fresh) == 6
    assert sample_fresh(be, tokenizer, records, cfg, fresh) == 0 and be.sampled == 6
    with pytest.raises(ConfigError):
        sample_fresh(be, tokenizer, records, SamplingConfig(n_per_record=3, max_new_tokens=5), fresh)

    trajs = load_trajectories(fresh)
    prompts = load_prompts(fresh)
    assert prompts[records[0].record_id].tolist() == student_prompt_ids(tokenizer, records[0])
    n_tokens = sum(len(t) for per in trajs.values() for t in per)
    assert score_fresh(be, "t0", fresh) == n_tokens and be.scored == 6
    assert score_fresh(be, "t0", fresh) == 0 and be.scored == 6
    logp = load_logp(fresh, "t0")
    r = records[1]
    direct = be.inner.score([student_prompt_ids(tokenizer, r)], [trajs[r.record_id][1].tolist()])[0]
    np.testing.assert_array_equal(logp[r.record_id][1], direct.logp)

    fixed = tmp_path / "fixed" / "t0.npz"
    assert score_fixed(be, tokenizer, records, fixed) > 0 and be.scored == 9
    assert score_fixed(be, tokenizer, records, fixed) == 0 and be.scored == 9
    got = load_fixed(fixed)
    assert got[r.record_id].tokens.tolist() == reference_text_ids(tokenizer, r)
    assert got[r.record_id].mu is not None and got[r.record_id].sigma.shape == got[r.record_id].logp.shape


def test_score_fresh_all_shares_each_prompt_across_targets_and_a_rerun_writes_what_the_first_would(
        tmp_path, tiny_model_dir, tokenizer, sample_records):
    """Two targets' directories holding trajectories of the same records: one score call over both (each record's
    prompt once per batch, not once per target), the same values as scoring each directory alone (to float
    rounding: the batches differ), record subsets honoured (NaN elsewhere); with one file deleted, the rerun
    scores both again and writes exactly the bytes it wrote before."""
    import torch

    records = sample_records[:3]
    inner = make_backend("transformers", tiny_model_dir, autocast_bf16=False, sample_bf16=False)
    dirs = [tmp_path / "fresh" / t for t in ("t0", "t1")]
    for i, d in enumerate(dirs):
        sample_fresh(inner, tokenizer, records, SamplingConfig(n_per_record=2, max_new_tokens=5, seed=i), d)
    calls, prefix_rows = [], []
    real = inner._score_shared_batch

    def spy(prefixes, conts, vocab_stats):
        prefix_rows.append(len({tuple(p) for p in prefixes}))
        return real(prefixes, conts, vocab_stats)

    inner._score_shared_batch = spy
    be = CountingBackend(inner)
    be_score = be.score
    be.score = lambda p, c, **kw: calls.append(len(p)) or be_score(p, c, **kw)
    only = [records[0].record_id, records[2].record_id]
    n = score_fresh_all(be, "m", [(dirs[0], None), (dirs[1], only)])
    assert calls == [6 + 4] and sum(prefix_rows) == 3  # one call; each of 3 prompts run once for both targets
    assert n == sum(len(t) for rid, per in load_trajectories(dirs[0]).items() for t in per) + sum(
        len(t) for rid, per in load_trajectories(dirs[1]).items() if rid in only for t in per)
    for d, ids in ((dirs[0], None), (dirs[1], only)):
        alone = tmp_path / "alone" / d.name
        alone.mkdir(parents=True)
        for f in d.iterdir():
            if not f.name.startswith("logp__"):
                (alone / f.name).write_bytes(f.read_bytes())
        score_fresh(inner, "m", alone, record_ids=ids)
        got, want = load_logp(d, "m"), load_logp(alone, "m")
        assert set(got) == set(want)
        for rid in got:
            for a, b in zip(got[rid], want[rid]):
                if ids is not None and rid not in ids:
                    assert np.isnan(a).all() and np.isnan(b).all()
                else:
                    torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b), rtol=0, atol=1e-5)
    first = logp_path(dirs[1], "m").read_bytes()
    kept = logp_path(dirs[0], "m").stat().st_mtime_ns
    logp_path(dirs[1], "m").unlink()
    assert score_fresh_all(be, "m", [(dirs[0], None), (dirs[1], only)]) == n and calls == [10, 10]
    assert logp_path(dirs[1], "m").read_bytes() == first
    assert logp_path(dirs[0], "m").stat().st_mtime_ns == kept  # a stored file is not rewritten
    assert score_fresh_all(be, "m", [(dirs[0], None), (dirs[1], only)]) == 0 and calls == [10, 10]


def test_already_sampled_reuses_only_trajectories_of_the_same_config_and_records(tmp_path):
    """The resume check both samplers (local and API) share: none stored -> sample; the same config and records ->
    reuse; another config or other records -> refuse (a run never reuses work done for other inputs)."""
    from leakaudit.signals.stages import already_sampled
    from leakaudit.signals.store import save_trajectories

    cfg = SamplingConfig(n_per_record=1, max_new_tokens=4, seed=3)
    assert not already_sampled(tmp_path, cfg, ["a", "b"])
    save_trajectories(tmp_path, ["a", "b"], [[[1, 2]], [[3]]],
                      {"config": cfg.to_dict(), "record_ids": ["a", "b"], "requested_record_ids": ["a", "b", "c"]})
    assert already_sampled(tmp_path, cfg, ["a", "b"])
    assert already_sampled(tmp_path, cfg, ["a", "b", "c"], ids_key="requested_record_ids")
    with pytest.raises(ConfigError, match="another config or other records"):
        already_sampled(tmp_path, cfg, ["a", "c"])
    with pytest.raises(ConfigError, match="another config or other records"):
        already_sampled(tmp_path, SamplingConfig(n_per_record=2, max_new_tokens=4, seed=3), ["a", "b"])
