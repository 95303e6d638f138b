"""The hand-written decode loop (leakaudit.signals.decode) computes what model.generate computes.

Rollouts (shadow_models.rollout, decoder='loop' by default) and signal sampling (HFBackend, sample_decoder='loop'
by default) run it. Float32, tiny random Llama (2 layers, SmolLM2's 49k vocabulary): the loop's tokens equal
generate's for the same seed (and leave the global RNG where generate leaves it), EOS and max_new_tokens behave as
generate's, left padding does not leak into a row, the static cache, the shared prefill and the trainer agree.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from leakaudit.data.records import Record
from leakaudit.errors import ConfigError
from leakaudit.models import bf16_copy
from leakaudit.padding import left_pad
from leakaudit.signals import SamplingConfig
from leakaudit.signals.decode import MultinomialDraw, decode
from leakaudit.signals.hf_backend import HFBackend, HFOptions
from leakaudit.signals.sampler import SeededSampler, row_seed
from shadow_models import OPDConfig, train_student
from shadow_models import trainer as trainer_mod
from shadow_models.rollout import sample_completions

PAD = 0
NEVER = [49151]  # an "EOS" the tiny model does not draw in these tests (checked where it matters)
# ragged lengths: every row but the first is left-padded
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17], [300, 301, 302]]


@pytest.fixture(scope="module")
def model(peaked_model):
    return peaked_model.eval()


def _generate(model, prompts, n, seed, *, temperature=1.0, top_p=1.0, eos=NEVER):
    from transformers import GenerationConfig

    ids, mask = left_pad(prompts, PAD)
    cfg = GenerationConfig(do_sample=True, temperature=temperature, top_p=top_p, top_k=0, max_new_tokens=n,
                           eos_token_id=list(eos), pad_token_id=PAD)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.shape[1]:]
    return out, torch.get_rng_state()


def _loop(model, prompts, n, seed, *, temperature=1.0, top_p=1.0, eos=NEVER, cache="dynamic"):
    ids, mask = left_pad(prompts, PAD)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = decode(model, ids, mask, max_new_tokens=n, draw=MultinomialDraw(temperature, top_p), eos_ids=eos,
                     pad_id=PAD, cache=cache)
    return out, torch.get_rng_state()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9), (1.3, 1.0), (1.0, 0.5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_loop_draws_generates_tokens_and_leaves_the_rng_where_generate_does(model, temperature, top_p, seed):
    ref, rng_ref = _generate(model, PROMPTS, 12, seed, temperature=temperature, top_p=top_p)
    got, rng_got = _loop(model, PROMPTS, 12, seed, temperature=temperature, top_p=top_p)
    assert got.shape == ref.shape == (len(PROMPTS), 12)
    assert torch.equal(got, ref)
    assert torch.equal(rng_got, rng_ref)  # one multinomial per step, as generate: what follows sees the same RNG
    assert not bool(torch.isin(ref, torch.tensor(NEVER)).any())
    assert len({tuple(r) for r in ref.tolist()}) == len(PROMPTS)  # the rows really differ (not all one token)


def test_another_seed_gives_other_tokens(model):
    a, _ = _loop(model, PROMPTS, 12, 0)
    b, _ = _loop(model, PROMPTS, 12, 1)
    assert not torch.equal(a, b)


def test_eos_ends_a_row_and_nothing_but_padding_follows(model):
    ref, _ = _generate(model, PROMPTS, 10, 3)  # no EOS: the tokens each row draws
    eos = int(ref[0, 2])  # row 0 ends at (the first occurrence of) its third token
    got, _ = _loop(model, PROMPTS, 10, 3, eos=[eos])
    gen, _ = _generate(model, PROMPTS, 10, 3, eos=[eos])
    assert torch.equal(got, gen)
    ended = []
    for r in range(len(PROMPTS)):
        row, first = got[r].tolist(), ref[r].tolist()
        k = first.index(eos) if eos in first else None
        if k is None:  # never drew it: the row is what it was without the EOS
            assert row == first[:len(row)]
        else:  # the same tokens up to the EOS, then padding only
            assert row[:k + 1] == first[:k + 1] and all(t == PAD for t in row[k + 1:])
            ended.append(k)
    assert ended and min(ended) <= 2
    if len(ended) == len(PROMPTS):  # every row ended: the loop stopped at the last one's EOS
        assert got.shape[1] == max(ended) + 1
    else:
        assert got.shape[1] == 10


def test_all_rows_ending_at_once_stops_the_loop(model):
    ref, _ = _generate(model, PROMPTS, 8, 5)
    eos = sorted(set(ref[:, 0].tolist()))  # every row's first token is an EOS
    got, _ = _loop(model, PROMPTS, 8, 5, eos=eos)
    gen, _ = _generate(model, PROMPTS, 8, 5, eos=eos)
    assert got.shape == gen.shape == (len(PROMPTS), 1)
    assert torch.equal(got, gen) and torch.equal(got[:, 0], ref[:, 0])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_max_new_tokens_is_respected(model, n):
    got, _ = _loop(model, PROMPTS, n, 0)
    assert got.shape == (len(PROMPTS), n)
    longer, _ = _loop(model, PROMPTS, n + 3, 0)
    assert torch.equal(longer[:, :n], got)  # a longer budget only appends


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_every_steps_logits_are_the_full_forwards(tiny_model_dir, cache):
    """Teacher-forced check of the cache, positions and mask: the logits each step draws from equal a cache-free
    forward of [left-padded prompt | tokens so far] at that position (float32, the unscaled tiny model)."""
    from leakaudit.models import load_model
    from leakaudit.padding import position_ids

    plain = load_model(tiny_model_dir).eval()
    seen: list[torch.Tensor] = []
    draw = MultinomialDraw()

    def recording(logits):
        seen.append(logits.clone())
        return draw(logits)

    ids, mask = left_pad(PROMPTS, PAD)
    torch.manual_seed(0)
    with torch.no_grad():
        new = decode(plain, ids, mask, max_new_tokens=6, draw=recording, eos_ids=NEVER, pad_id=PAD, cache=cache)
        full_ids = torch.cat([ids, new], dim=1)
        full_mask = torch.cat([mask, torch.ones_like(new)], dim=1)
        logits = plain(input_ids=full_ids, attention_mask=full_mask, position_ids=position_ids(full_mask)).logits
    assert len(seen) == new.shape[1] == 6
    for t, got in enumerate(seen):
        torch.testing.assert_close(got, logits[:, ids.shape[1] - 1 + t].float(), atol=1e-5, rtol=1e-5)


def _seeded_loop(model, prompts, n, seeds, *, rows=None, cache="dynamic"):
    ids, mask = left_pad(prompts, PAD)
    sampler = SeededSampler(seeds, 1.0, 1.0)
    with torch.no_grad():
        return decode(model, ids, mask, max_new_tokens=n, draw=sampler.draw, eos_ids=NEVER, pad_id=PAD, rows=rows,
                      cache=cache)


def test_left_padding_does_not_leak_into_a_row(model):
    """Each row of a left-padded batch, with its own seeded sampler, equals its prompt decoded alone."""
    seeds = [row_seed(0, p, 0) for p in PROMPTS]
    batch = _seeded_loop(model, PROMPTS, 10, seeds)
    for r, (p, s) in enumerate(zip(PROMPTS, seeds)):
        alone = _seeded_loop(model, [p], 10, [s])
        assert torch.equal(batch[r], alone[0]), r
    # and a prompt padded on the left by more than its own length still decodes the same
    long = [list(range(100, 140))] + PROMPTS[1:2]
    again = _seeded_loop(model, long, 10, [row_seed(0, long[0], 0), seeds[1]])
    assert torch.equal(again[1], batch[1])


def test_static_cache_gives_the_dynamic_caches_tokens(model):
    dyn, _ = _loop(model, PROMPTS, 12, 2)
    static, _ = _loop(model, PROMPTS, 12, 2, cache="static")
    assert torch.equal(static, dyn)
    with pytest.raises(ValueError, match="cache="):
        _loop(model, PROMPTS, 4, 2, cache="paged")


def test_shared_prefill_rows_equal_the_repeated_prompts(model):
    rows = [0, 0, 1, 2, 2, 2]
    seeds = [row_seed(0, PROMPTS[g], j) for j, g in enumerate(rows)]
    shared = _seeded_loop(model, PROMPTS[:3], 9, seeds, rows=torch.tensor(rows))
    repeated = _seeded_loop(model, [PROMPTS[g] for g in rows], 9, seeds)
    assert torch.equal(shared, repeated)
    assert not torch.equal(shared[0], shared[1])  # two trajectories of one prompt differ by their seeds


# ---------------------------------------------------------------- call sites

@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.8, 0.95)])
def test_sample_completions_loop_equals_generate(model, temperature, top_p):
    kw = dict(max_new_tokens=9, temperature=temperature, top_p=top_p, eos_ids=[2], pad_id=PAD, seed=11)
    model.train()  # sample_completions samples in eval mode and restores the mode
    a = sample_completions(model, PROMPTS, **kw, decoder="loop")
    rng_a = torch.get_rng_state()
    assert model.training
    b = sample_completions(model, PROMPTS, **kw, decoder="generate")
    model.eval()
    assert a == b and torch.equal(rng_a, torch.get_rng_state())
    assert all(1 <= len(c) <= 9 for c in a)
    with pytest.raises(ValueError, match="decoder"):
        sample_completions(model, PROMPTS, **kw, decoder="beam")


def test_sample_completions_loop_equals_generate_on_a_bf16_copy(model):
    """The rollout copy's case (bf16 weights, no autocast): also the same tokens."""
    copy = bf16_copy(model)
    kw = dict(max_new_tokens=9, temperature=1.0, top_p=1.0, eos_ids=[2], pad_id=PAD, seed=4)
    assert sample_completions(copy, PROMPTS, **kw, decoder="loop") == \
        sample_completions(copy, PROMPTS, **kw, decoder="generate")


@pytest.mark.parametrize("share_prefill", [False, True])
def test_hf_backend_loop_samples_what_generate_samples(model, share_prefill):
    cfg = SamplingConfig(n_per_record=3, max_new_tokens=8, batch_size=4, seed=7)
    prompts = PROMPTS[:3]
    loop = HFBackend.from_model(model, device="cpu", sample_bf16=False, share_prefill=share_prefill)
    gen = HFBackend.from_model(model, device="cpu", sample_bf16=False, sample_decoder="generate")
    a, b = loop.sample(prompts, cfg), gen.sample(prompts, cfg)
    assert a == b
    assert all(len(t) >= 1 for per in a for t in per) and a[0][0] != a[0][1]
    assert HFOptions().sample_decoder == "loop"
    with pytest.raises(ConfigError, match="sample_decoder"):
        HFOptions(sample_decoder="beam")


# ---------------------------------------------------------------- trainer

RECORDS = [Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}." + " Yes." * a, source="test")
           for a, b in [(2, 3), (7, 5), (1, 4), (4, 9)]]
PLAIN = OPDConfig(batch_size=4, epochs=2, max_new_tokens=6, learning_rate=1e-3, seed=0, bf16_autocast=False,
                  loss="full_rkl")


def _train(monkeypatch, model_dir, teacher_dir, out: Path, cfg: OPDConfig, decoder: str):
    """Train with OPDConfig.rollout_decoder=decoder; a spy checks the trainer hands that decoder to every rollout."""
    rollouts: list = []

    def sampling(*a, **k):
        assert k["decoder"] == decoder
        got = sample_completions(*a, **k)
        rollouts.append(got)
        return got

    monkeypatch.setattr(trainer_mod, "sample_completions", sampling)
    train_student(model_dir, RECORDS, out, replace(cfg, rollout_decoder=decoder), teacher_model=teacher_dir,
                  progress=False)
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    return rollouts, ledger, load_file(str(out / "model.safetensors"))


@pytest.mark.parametrize("cfg", [PLAIN, replace(PLAIN, bf16_autocast=True)], ids=["fp32", "bf16_rollout_copy"])
def test_trainer_with_the_loop_is_deterministic_and_equals_generate(cfg, monkeypatch, tiny_model_dir,
                                                                     tiny_model_dir_b, tmp_path):
    a = _train(monkeypatch, tiny_model_dir, tiny_model_dir_b, tmp_path / "a", cfg, "loop")
    b = _train(monkeypatch, tiny_model_dir, tiny_model_dir_b, tmp_path / "b", cfg, "loop")
    g = _train(monkeypatch, tiny_model_dir, tiny_model_dir_b, tmp_path / "g", cfg, "generate")
    base = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    (ra, la, wa), (rb, lb, wb), (rg, lg, wg) = a, b, g
    assert len(ra) == 2 and ra == rb == rg  # the rollouts of every step
    assert ra[0] != ra[1]  # the steps sample differently (seeded per step)
    for x, y, z in zip(la, lb, lg):
        assert x["completion_lengths"] == y["completion_lengths"] == z["completion_lengths"]
        assert x["loss"] == y["loss"] == z["loss"] and x["teacher_kl"] == y["teacher_kl"] == z["teacher_kl"]
    for name in wa:
        assert torch.equal(wa[name], wb[name]) and torch.equal(wa[name], wg[name]), name
    assert any(not torch.equal(wa[n], base[n]) for n in base)  # it trained


def test_rollout_decoder_is_validated_and_loop_by_default():
    assert OPDConfig().rollout_decoder == "loop"
    with pytest.raises(ConfigError, match="rollout_decoder"):
        OPDConfig(rollout_decoder="beam")
