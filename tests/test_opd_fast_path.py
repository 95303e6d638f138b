"""The OPD step's speed levers: micro-batched updates, the bf16 rollout copy, fused AdamW.

Each lever either computes the same thing as the plain path (micro-batches, fused AdamW: equal to float rounding in
fp32) or a stated bf16 approximation of it (the rollout copy: the student's weights rounded to bf16, LoRA merged).
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from leakaudit.data.records import Record
from leakaudit.errors import ConfigError
from leakaudit.models import load_model
from shadow_models import OPDConfig, train_student
from shadow_models.modeling import load_trainable
from shadow_models.rollout_policy import BF16RolloutPolicy
from shadow_models.trainer import micro_batches

RECORDS = [Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}." + " Yes." * a, source="test")
           for a, b in [(2, 3), (7, 5), (1, 4), (4, 9), (3, 3)]]
# fp32, 5 records in batches of 5 (one step per epoch), 2 epochs, a separate frozen teacher; levers that change
# the sampling or the optimizer are switched off so only the lever under test differs
PLAIN = OPDConfig(batch_size=5, epochs=2, max_new_tokens=6, learning_rate=1e-3, seed=0, bf16_autocast=False,
                  loss="full_rkl", teacher_prefix_cache=False, fused_optimizer=False, micro_batch_size=None)


def test_micro_batches_group_by_length_longest_first():
    # lengths 5, 9, 7, 9, 1 -> longest first, ties by index: 1 (9), 3 (9), 2 (7), 0 (5), 4 (1)
    assert micro_batches([5, 9, 7, 9, 1], 2) == [[1, 3], [2, 0], [4]]
    assert micro_batches([5, 9, 7, 9, 1], None) == [[0, 1, 2, 3, 4]]
    assert micro_batches([5, 9, 7], 3) == [[0, 1, 2]]
    assert micro_batches([5, 9, 7], 1) == [[1], [2], [0]]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_micro_batch_size_is_checked(bad):
    with pytest.raises(ConfigError, match="micro_batch_size"):
        OPDConfig(micro_batch_size=bad)


def test_levers_are_on_by_default():
    cfg = OPDConfig()
    assert cfg.teacher_prefix_cache and cfg.rollout_bf16_copy and cfg.fused_optimizer


def _train(model_dir, teacher_dir, out: Path, cfg: OPDConfig):
    train_student(model_dir, RECORDS, out, cfg, teacher_model=teacher_dir, progress=False)
    ledger = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    return ledger, load_file(str(out / "model.safetensors"))


def _assert_same_student(a, b, base, tol=1e-5):
    """Same ledger (records, lengths, KL, loss, and the gradient's norm, which a mis-scaled accumulation changes),
    and the same weights: each element within 1e-4 of its tensor's largest update plus 4 ulp, or exactly equal when
    tol == 0. Meaningful only under `linear_adamw` (below): there the update is proportional to the
    gradient, so float-rounding differences in the gradient stay float-rounding differences in the weights."""
    (la, wa), (lb, wb) = a, b
    assert len(la) == len(lb) == 2
    for x, y in zip(la, lb):
        assert x["record_ids"] == y["record_ids"] and x["completion_lengths"] == y["completion_lengths"]
        assert abs(x["teacher_kl"] - y["teacher_kl"]) <= tol
        assert abs(x["loss"] - y["loss"]) <= tol
        assert abs(x["grad_norm"] - y["grad_norm"]) <= 1e-4 * x["grad_norm"] if tol else x["grad_norm"] == y["grad_norm"]
    assert wa.keys() == wb.keys()
    for name in wa:
        if tol == 0:
            assert torch.equal(wa[name], wb[name]), name
            continue
        diff = (wa[name] - wb[name]).abs()
        update = (wa[name] - base[name]).abs()  # every trained tensor is in the base checkpoint (lm_head is tied)
        assert update.max() > 0, name
        # float rounding of the accumulated gradient (relative to the largest update) plus the rounding of the stored
        # weight itself: a few units in the last place of w (the updates here are ~1e-6, w ~1e-2, an ulp ~2e-9)
        ulp = torch.nextafter(wa[name].abs(), torch.tensor(float("inf"))) - wa[name].abs()
        assert (diff <= 1e-4 * update.max() + 4 * ulp).all(), name


@pytest.fixture(scope="module", autouse=True)
def linear_adamw():
    """AdamW with eps = 1e-2, far above every gradient element here (grad_norm ~3e-3), for this module's trainings.

    With the default eps = 1e-8, AdamW's first steps move each element by about lr * sign(gradient) whatever its
    size, so an element whose gradient is rounding noise moves by +-lr in a direction the summation order decides:
    between one pass and micro-batches such elements differed by 1.1e-4 (embed_tokens, AVX512-only CPU) and in 0.2%
    of v_proj (the floor dependency versions), failing a weight comparison that says nothing about accumulation.
    With eps far above |gradient| the update is lr * m / eps, linear in the gradient, so comparing weights compares
    the accumulated gradients, scale included."""
    adamw = torch.optim.AdamW
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim, "AdamW", lambda params, **kw: adamw(params, eps=1e-2, **kw))
        yield


@pytest.fixture(scope="module")
def plain_student(tiny_model_dir, tiny_model_dir_b, tmp_path_factory):
    return _train(tiny_model_dir, tiny_model_dir_b, tmp_path_factory.mktemp("plain") / "s", PLAIN)


@pytest.mark.parametrize("size", [1, 2, 4])
def test_micro_batched_update_equals_one_pass(size, plain_student, tiny_model_dir, tiny_model_dir_b, tmp_path):
    base = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    got = _train(tiny_model_dir, tiny_model_dir_b, tmp_path / "s", replace(PLAIN, micro_batch_size=size))
    _assert_same_student(plain_student, got, base)


def test_fused_adamw_equals_multi_tensor_adamw(plain_student, tiny_model_dir, tiny_model_dir_b, tmp_path):
    base = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    got = _train(tiny_model_dir, tiny_model_dir_b, tmp_path / "s", replace(PLAIN, fused_optimizer=True))
    _assert_same_student(plain_student, got, base)


def test_rollout_copy_is_not_used_in_fp32(plain_student, tiny_model_dir, tiny_model_dir_b, tmp_path):
    # fp32 training samples from the student itself: the flag changes nothing
    base = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    got = _train(tiny_model_dir, tiny_model_dir_b, tmp_path / "s", replace(PLAIN, rollout_bf16_copy=True))
    _assert_same_student(plain_student, got, base, tol=0.0)


def _student(model_dir, rank):
    torch.manual_seed(0)
    return load_trainable(model_dir, torch.device("cpu"), lora_rank=rank, lora_alpha=8, lora_dropout=0.0,
                          target_modules=("q_proj", "v_proj", "down_proj"))


@pytest.mark.parametrize("rank", [0, 4])
def test_rollout_copy_is_the_student_rounded_to_bf16_and_follows_updates(rank, tiny_model_dir):
    student = _student(tiny_model_dir, rank)
    if rank:  # LoRA B starts at zero: make the adapter do something, so merging is tested
        for name, p in student.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.5)
    policy = BF16RolloutPolicy(student)

    def reference():  # what the copy must hold: the merged student, cast to bf16 once
        plain = copy.deepcopy(student)
        plain = plain.merge_and_unload() if rank else plain
        return {n: p.detach().to(torch.bfloat16) for n, p in plain.named_parameters()}

    def check():
        got = dict(policy.model.named_parameters())
        ref = reference()
        assert got.keys() == ref.keys()
        for name in ref:
            assert got[name].dtype == torch.bfloat16 and not got[name].requires_grad
            # merge in fp32 then one rounding: equal, or one bf16 ulp apart where the sum's order differs
            assert torch.allclose(got[name].float(), ref[name].float(), rtol=2 ** -7, atol=1e-6), name

    check()
    # buffers keep their dtype: a bf16 rotary inv_freq would shift every rotary phase by up to ~0.4% of the position
    buffers = dict(policy.model.named_buffers())
    assert buffers and all(b.dtype == torch.float32 for n, b in buffers.items() if b.is_floating_point()), buffers
    with torch.no_grad():  # an "update": every trainable parameter moves
        for p in student.parameters():
            if p.requires_grad:
                p.add_(0.25)
    before = {n: p.clone() for n, p in policy.model.named_parameters()}
    policy.sync(student)
    check()
    assert any(not torch.equal(before[n], p) for n, p in policy.model.named_parameters())
    if rank:  # the student's own base weights are untouched by the merge (no merge/unmerge round trip)
        base = load_model(tiny_model_dir)
        for name, p in base.named_parameters():
            if name.endswith("q_proj.weight"):
                got = student.get_submodule("base_model.model." + name.rsplit(".", 1)[0]).base_layer.weight
                assert torch.equal(got, p)


def test_rollout_copy_log_probs_track_autocast_student(tiny_model_dir):
    """The bf16 copy's next-token log-probs vs the fp32 student's under bf16 autocast, on the same ids: both are
    bf16 approximations of the fp32 policy; bound: 0.05 nats at every position of a 400-token sequence (tiny
    model, vocab 49152; long, so a rotary embedding computed in bf16 would show)."""
    student = _student(tiny_model_dir, 0)
    student.eval()
    policy = BF16RolloutPolicy(student)
    ids = torch.randint(10, 2000, (2, 400), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lp_amp = student(input_ids=ids).logits.float().log_softmax(-1)
        lp_copy = policy.model(input_ids=ids).logits.float().log_softmax(-1)
        lp_fp32 = student(input_ids=ids).logits.float().log_softmax(-1)
    token = ids[:, 1:, None]
    diff = (lp_copy[:, :-1].gather(-1, token) - lp_amp[:, :-1].gather(-1, token)).abs()
    assert float(diff.max()) <= 0.05
    assert float((lp_copy - lp_fp32).abs().max()) <= 0.1


def test_bf16_student_with_rollout_copy_trains_and_records_config(tiny_model_dir, tiny_model_dir_b, tmp_path):
    cfg = replace(PLAIN, bf16_autocast=True, rollout_bf16_copy=True, teacher_prefix_cache=True,
                  fused_optimizer=True, micro_batch_size=2)
    ledger, weights = _train(tiny_model_dir, tiny_model_dir_b, tmp_path / "s", cfg)
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["config"]["rollout_bf16_copy"] and meta["config"]["micro_batch_size"] == 2
    assert all(e["completion_tokens"] > 0 and e["teacher_kl"] == e["teacher_kl"] for e in ledger)
    assert all(w.dtype == torch.float32 for w in weights.values())  # master weights stay fp32
