"""The teacher's prefix KV cache (shadow_models.teacher_cache, OPDConfig.teacher_prefix_cache): same teacher
log-probs as the full forward, a student trained with it equals one trained without (fp32), the cached state is
never mutated by use, and it is freed when train_student returns."""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from leakaudit.padding import right_pad
from shadow_models import OPDConfig, train_student
from shadow_models.batching import completion_logits
from shadow_models.losses import sampled_logps
from shadow_models.teacher_cache import TeacherPrefixCache

ATOL = 1e-5


@pytest.fixture(scope="module")
def teacher(tiny_model_dir):
    from leakaudit.models import LoadOptions, load_model

    return load_model(tiny_model_dir, LoadOptions(dtype="float32"))


def _contexts_and_completions(tokenizer, sample_records):
    """Teacher contexts of different lengths and completions of different lengths, two ending early at EOS (the
    rest of their row is padding), one of a single EOS token."""
    from leakaudit.prompting import teacher_prompt_ids

    recs = sample_records[:5]
    # different privileged lengths -> different context lengths
    recs = [replace(r, privileged=r.privileged + " Check:" * (3 * i)) for i, r in enumerate(recs)]
    contexts = [teacher_prompt_ids(tokenizer, r) for r in recs]
    assert len({len(c) for c in contexts}) == len(contexts)
    g = torch.Generator().manual_seed(0)
    eos = int(tokenizer.eos_token_id)
    comps = [torch.randint(100, 5000, (n,), generator=g).tolist() for n in (9, 4, 9, 6, 1)]
    comps[1][-1] = eos  # ends at EOS after 4 tokens
    comps[3][-1] = eos
    comps[4] = [eos]
    return contexts, comps, int(tokenizer.pad_token_id)


@pytest.mark.parametrize("rows_per_forward", [None, 1, 2])
def test_cached_prefix_gives_full_forward_teacher_logprobs(teacher, tokenizer, sample_records, rows_per_forward):
    contexts, comps, pad_id = _contexts_and_completions(tokenizer, sample_records)
    ids, mask = right_pad(comps, pad_id)
    with torch.no_grad():
        full = completion_logits(teacher, contexts, ids, mask, pad_id)
    cache = TeacherPrefixCache()
    got = cache.logits(teacher, contexts, ids, mask, rows_per_forward=rows_per_forward)
    assert got.shape == full.shape
    keep = mask.bool()
    lp_full, lp_got = sampled_logps(full, ids), sampled_logps(got, ids)
    assert (lp_got - lp_full)[keep].abs().max() <= ATOL
    assert torch.allclose(got[keep], full[keep], atol=ATOL, rtol=0)
    # padding positions too (masked out of every loss, but they see the same keys and positions)
    assert torch.allclose(got, full, atol=ATOL, rtol=0)
    assert len(cache) == len(contexts)
    assert [cache.entry(c).length for c in contexts] == [len(c) - 1 for c in contexts]


def test_cache_is_not_mutated_by_use(teacher, tokenizer, sample_records):
    contexts, comps, pad_id = _contexts_and_completions(tokenizer, sample_records)
    ids, mask = right_pad(comps, pad_id)
    cache = TeacherPrefixCache()
    assert cache.ensure(teacher, contexts) == len(contexts)
    snapshot = {tuple(c): [(k.clone(), v.clone()) for k, v in cache.entry(c).kv] for c in contexts}
    step1 = cache.logits(teacher, contexts, ids, mask)
    # step 2: other completions, other order, other batch composition (other padding widths)
    other = [list(reversed(c)) + c[:3] for c in comps[:3]]
    o_ids, o_mask = right_pad(other, pad_id)
    cache.logits(teacher, contexts[2:][::-1], o_ids, o_mask)
    cache.logits(teacher, contexts[:1], ids[:1], mask[:1], rows_per_forward=1)
    assert cache.ensure(teacher, contexts) == 0  # nothing recomputed
    step3 = cache.logits(teacher, contexts, ids, mask)
    assert torch.equal(step1, step3)
    for c in contexts:
        for (k, v), (k0, v0) in zip(cache.entry(c).kv, snapshot[tuple(c)]):
            assert torch.equal(k, k0) and torch.equal(v, v0)
    assert cache.nbytes() > 0
    cache.clear()
    assert len(cache) == 0 and cache.nbytes() == 0


def test_config_field_is_on_by_default():
    assert OPDConfig().teacher_prefix_cache is True
    assert OPDConfig(teacher_prefix_cache=False).to_dict()["teacher_prefix_cache"] is False


class _Tracked(TeacherPrefixCache):
    """TeacherPrefixCache that keeps weak references to itself and to every tensor it stores."""

    instances: list = []
    tensors: list = []

    def __init__(self) -> None:
        super().__init__()
        _Tracked.instances.append(weakref.ref(self))

    def ensure(self, model, contexts):
        added = super().ensure(model, contexts)
        for e in self._entries.values():
            for k, v in e.kv:
                _Tracked.tensors += [weakref.ref(k), weakref.ref(v)]
        return added


def _weights(out: Path) -> dict[str, torch.Tensor]:
    name = "adapter_model.safetensors" if (out / "adapter_model.safetensors").exists() else "model.safetensors"
    return load_file(str(out / name))


def _ledger(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]


# full fine-tuning from a separate frozen teacher (full_rkl and lr as the default study), and LoRA
# self-distillation (the teacher is the student's frozen base under its disabled adapter; sampled_rkl)
SETTINGS = {
    "full_ft_teacher": (OPDConfig(batch_size=2, epochs=2, max_new_tokens=6, learning_rate=1e-4, seed=0,
                                  bf16_autocast=False, loss="full_rkl"), True),
    "lora_self": (OPDConfig(batch_size=2, epochs=2, max_new_tokens=6, learning_rate=1e-3, seed=0,
                            bf16_autocast=False, loss="sampled_rkl", lora_rank=4, lora_alpha=8), False),
}


@pytest.fixture(scope="module", params=list(SETTINGS))
def pair(request, tiny_model_dir, tiny_model_dir_b, tmp_path_factory):
    """The same student trained 4 steps (2 epochs of 2 batches: the second epoch reuses the cache in other
    batches) without and with the prefix cache; the cached run uses _Tracked."""
    from leakaudit.data.records import Record

    cfg, separate_teacher = SETTINGS[request.param]
    records = [Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}." + " Yes." * a, source="test")
               for a, b in [(2, 3), (7, 5), (1, 4), (4, 9)]]
    root = tmp_path_factory.mktemp(f"tc_{request.param}")
    teacher_model = tiny_model_dir_b if separate_teacher else None
    plain = train_student(tiny_model_dir, records, root / "plain", replace(cfg, teacher_prefix_cache=False),
                          teacher_model=teacher_model, progress=False)
    _Tracked.instances.clear()
    _Tracked.tensors.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("shadow_models.trainer.TeacherPrefixCache", _Tracked)
        cached = train_student(tiny_model_dir, records, root / "cached", replace(cfg, teacher_prefix_cache=True),
                               teacher_model=teacher_model, progress=False)
    gc.collect()
    alive = (sum(r() is not None for r in _Tracked.instances), sum(r() is not None for r in _Tracked.tensors),
             len(_Tracked.instances), len(_Tracked.tensors))
    return plain, cached, alive


def test_student_with_prefix_cache_equals_student_without(pair, tiny_model_dir):
    plain, cached, _ = pair
    base_weights = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    lp, lc = _ledger(plain), _ledger(cached)
    assert len(lp) == len(lc) == 4
    for a, b in zip(lp, lc):
        assert a["record_ids"] == b["record_ids"]
        assert a["completion_lengths"] == b["completion_lengths"]
        assert abs(a["teacher_kl"] - b["teacher_kl"]) <= 1e-5
        assert abs(a["loss"] - b["loss"]) <= 1e-5
    wp, wc, w0 = _weights(plain), _weights(cached), base_weights
    assert wp.keys() == wc.keys()
    for name in wp:
        assert torch.allclose(wp[name], wc[name], atol=1e-5, rtol=0), name
        # AdamW divides each gradient by its own running scale, so the teacher logits' float rounding (~1e-7)
        # shows in the update of parameters whose gradient is tiny: bound the difference by the update itself
        if name in w0:
            moved = (wp[name] - w0[name]).abs().max()
            assert moved > 0 and (wp[name] - wc[name]).abs().max() <= 1e-2 * moved, name
    assert json.loads((cached / "meta.json").read_text())["config"]["teacher_prefix_cache"] is True


def test_prefix_cache_is_freed_when_train_student_returns(pair):
    _, _, (instances_alive, tensors_alive, n_instances, n_tensors) = pair
    assert n_instances == 1 and n_tensors > 0  # the cached run did build and fill one
    assert instances_alive == 0 and tensors_alive == 0
