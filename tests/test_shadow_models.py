"""shadow_models: loss golden values, masking, plan, and end-to-end OPD mechanics on a tiny random Llama."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from leakaudit.errors import ConfigError
from leakaudit.io import is_done
from shadow_models import OPDConfig, TeacherPrepConfig, prepare_teacher, train_student
from shadow_models import optim as sm_optim
from leakaudit.padding import right_pad
from shadow_models.batching import completion_logits, truncate_at_eos
from shadow_models.losses import masked_mean, per_token_loss
from shadow_models.plan import plan_steps

LN2, LN3 = math.log(2.0), math.log(3.0)


def _logits(*rows):
    """Logits whose softmax is exactly the given probability rows: [1, T, V]."""
    return torch.log(torch.tensor([rows], dtype=torch.float32))


# Vocabulary of 3, completion of 2 tokens (y = [0, 2]).
# t=0: p_s = [1/2, 1/4, 1/4], p_t = [1/8, 1/8, 3/4]; t=1: p_s = p_t = [1/3, 1/3, 1/3] (every divergence 0).
STUDENT = _logits([0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3])
TEACHER = _logits([0.125, 0.125, 0.75], [1 / 3, 1 / 3, 1 / 3])
Y = torch.tensor([[0, 2]])
MASK = torch.ones(1, 2)


@pytest.mark.parametrize("loss, beta, expected_t0", [
    # sampled: (log p_s(0) - log p_t(0)) * log p_s(0) = (-ln2 + 3 ln2) * (-ln2) = -2 ln2^2 = -0.960906
    ("sampled_rkl", 0.5, -2 * LN2 ** 2),
    # reverse KL: .5 ln(.5/.125) + .25 ln(.25/.125) + .25 ln(.25/.75) = 1.25 ln2 - .25 ln3 = 0.591781
    ("full_rkl", 0.5, 1.25 * LN2 - 0.25 * LN3),
    # beta=0 -> forward KL(t||s): .125 ln(.25) + .125 ln(.5) + .75 ln3 = -.375 ln2 + .75 ln3 = 0.564029
    ("jsd", 0.0, -0.375 * LN2 + 0.75 * LN3),
    # beta=1 -> reverse KL, as full_rkl
    ("jsd", 1.0, 1.25 * LN2 - 0.25 * LN3),
    # beta=.5: m = [.3125, .1875, .5]; KL(t||m) = .125 ln .4 + .125 ln(2/3) + .75 ln 1.5 = 0.138880,
    # KL(s||m) = .5 ln 1.6 + .25 ln(4/3) + .25 ln .5 = 0.133636; JSD = (0.138880 + 0.133636) / 2 = 0.136258
    ("jsd", 0.5, 0.5 * (0.125 * math.log(0.4) + 0.125 * math.log(2 / 3) + 0.75 * math.log(1.5))
     + 0.5 * (0.5 * math.log(1.6) + 0.25 * math.log(4 / 3) + 0.25 * math.log(0.5))),
])
def test_loss_golden_values(loss, beta, expected_t0):
    per_tok = per_token_loss(STUDENT, TEACHER, Y, loss=loss, beta=beta)
    assert per_tok.shape == (1, 2)
    assert per_tok[0, 0].item() == pytest.approx(expected_t0, abs=1e-5)
    assert per_tok[0, 1].item() == pytest.approx(0.0, abs=1e-6)
    assert masked_mean(per_tok, MASK).item() == pytest.approx(expected_t0 / 2, abs=1e-5)


def test_sampled_rkl_is_policy_gradient_with_detached_advantage():
    # d/dz of A * log p_s(y) with A = 2 ln2 detached: A * (onehot(y) - p_s) = 2 ln2 * [.5, -.25, -.25]
    student = STUDENT.clone().requires_grad_(True)
    per_token_loss(student, TEACHER, Y, loss="sampled_rkl")[0, 0].backward()
    assert student.grad[0, 0].tolist() == pytest.approx([LN2, -0.5 * LN2, -0.5 * LN2], abs=1e-5)
    assert student.grad[0, 1].abs().max().item() == 0.0


def test_topk_jsd_uses_teacher_top_k_renormalised():
    # V=4, p_s = [.4, .3, .2, .1], p_t = [.1, .2, .3, .4]; teacher top-2 = tokens {3, 2}.
    # renormalised: t = [4/7, 3/7], s = [1/3, 2/3]; forward KL = 4/7 ln(12/7) + 3/7 ln(9/14) = 0.118641
    s = _logits([0.4, 0.3, 0.2, 0.1])
    t = _logits([0.1, 0.2, 0.3, 0.4])
    got = per_token_loss(s, t, torch.tensor([[0]]), loss="jsd", beta=0.0, topk=2)
    assert got.item() == pytest.approx(4 / 7 * math.log(12 / 7) + 3 / 7 * math.log(9 / 14), abs=1e-5)
    full = per_token_loss(s, t, torch.tensor([[0]]), loss="jsd", beta=0.0, topk=None)
    assert abs(full.item() - got.item()) > 1e-3


def test_masked_mean_ignores_padding():
    values = torch.tensor([[1.0, 3.0, 1e6], [5.0, -1e6, float("inf")]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_mean(values, mask).item() == pytest.approx(3.0)
    assert masked_mean(torch.zeros(2, 3), torch.zeros(2, 3)).item() == 0.0
    # padded completion tokens of a sequence give the same per-token losses on its real tokens
    padded_s = torch.cat([STUDENT, _logits([0.9, 0.05, 0.05])], dim=1)
    padded_t = torch.cat([TEACHER, _logits([0.05, 0.05, 0.9])], dim=1)
    ids, m = right_pad([[0, 2]], pad_id=1)
    ids = torch.cat([ids, torch.tensor([[1]])], 1)
    m = torch.cat([m, torch.tensor([[0]])], 1)
    for loss in ("sampled_rkl", "full_rkl", "jsd"):
        a = masked_mean(per_token_loss(padded_s, padded_t, ids, loss=loss), m)
        b = masked_mean(per_token_loss(STUDENT, TEACHER, Y, loss=loss), MASK)
        assert a.item() == pytest.approx(b.item(), abs=1e-6)


def test_left_padded_prompts_score_like_unpadded(tiny_model_dir):
    from leakaudit.models import load_model

    model = load_model(tiny_model_dir)
    short, long_ = [5, 6, 7], [9, 10, 11, 12, 13, 14, 15]
    comps = [[20, 21, 22], [30, 31]]
    ids, mask = right_pad(comps, pad_id=2)
    with torch.no_grad():
        both = completion_logits(model, [short, long_], ids, mask, pad_id=2)
        alone = completion_logits(model, [short], ids[:1, :3], mask[:1, :3], pad_id=2)
    assert torch.allclose(both[0], alone[0], atol=1e-5)
    assert truncate_at_eos([4, 8, 2, 9, 2], [2]) == [4, 8, 2]
    assert truncate_at_eos([4, 8], [2]) == [4, 8]


def test_plan_is_reproducible_and_visits_every_record_each_epoch():
    a = plan_steps(10, 3, 4, seed=7)
    assert a == plan_steps(10, 3, 4, seed=7)
    assert a != plan_steps(10, 3, 4, seed=8)
    assert [s.index for s in a] == list(range(9))
    for epoch in range(3):
        seen = [i for s in a if s.epoch == epoch for i in s.positions]
        assert sorted(seen) == list(range(10))


@pytest.mark.parametrize("kwargs", [dict(loss="kl"), dict(beta=1.5), dict(topk=5), dict(loss="jsd", topk=0),
                                    dict(temperature=0), dict(top_p=0), dict(epochs=0), dict(batch_size=0),
                                    dict(learning_rate=0), dict(lora_rank=-1), dict(max_new_tokens=0),
                                    dict(teacher_template="{prompt} only"), dict(lr_schedule="step")])
def test_config_range_checks(kwargs):
    with pytest.raises(ConfigError):
        OPDConfig(**kwargs)


TINY = OPDConfig(batch_size=4, epochs=2, max_new_tokens=4, learning_rate=1e-2, seed=0, bf16_autocast=False)


def _weights(out: Path) -> dict[str, torch.Tensor]:
    name = "adapter_model.safetensors" if (out / "adapter_model.safetensors").exists() else "model.safetensors"
    return load_file(str(out / name))


def _ledger(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    from leakaudit.data.records import Record

    records = [Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}.", source="test")
               for a, b in [(2, 3), (7, 5), (11, 4), (6, 9), (13, 8), (21, 2), (3, 3)]]
    root = tmp_path_factory.mktemp("students")
    out = train_student(tiny_model_dir, records, root / "s0", TINY, model_id="s0", progress=False)
    return records, root, out


def test_student_leaves_weights_meta_ledger_done(trained, tiny_model_dir):
    from leakaudit.models import load_model

    records, _, out = trained
    assert is_done(out) and not out.with_name("s0.partial").exists()
    ledger = _ledger(out)
    assert [e["step"] for e in ledger] == [0, 1, 2, 3]  # 7 records, batch 4, 2 epochs -> 2 steps per epoch
    ids = {r.record_id for r in records}
    for epoch in (0, 1):
        seen = [rid for e in ledger if e["epoch"] == epoch for rid in e["record_ids"]]
        assert sorted(seen) == sorted(ids)
    plan = plan_steps(len(records), 2, 4, seed=0)
    assert [e["record_ids"] for e in ledger] == [[records[i].record_id for i in s.positions] for s in plan]
    for e in ledger:
        assert len(e["completion_lengths"]) == len(e["record_ids"])
        assert all(1 <= n <= 4 for n in e["completion_lengths"])
        assert math.isfinite(e["teacher_kl"]) and math.isfinite(e["loss"]) and e["seconds"] > 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["record_ids"] == [r.record_id for r in records]
    assert meta["loss"] == "sampled_rkl" and meta["seed"] == 0 and meta["steps"] == 4
    assert meta["teacher_model"] is None and meta["config"]["max_new_tokens"] == 4
    assert "{privileged}" in meta["teacher_template"] and meta["versions"]["trl"]
    model = load_model(str(out))
    base = load_model(tiny_model_dir)
    diff = sum((a - b).abs().sum().item() for a, b in zip(model.parameters(), base.parameters()))
    assert diff > 0  # training moved the weights


def test_done_student_is_skipped(trained, monkeypatch):
    records, root, out = trained
    before = (out / "ledger.jsonl").stat().st_mtime_ns, (out / "DONE").stat().st_mtime_ns

    def boom(*a, **k):
        raise AssertionError("must not train again")

    monkeypatch.setattr("shadow_models.trainer.setup_training", boom)
    assert train_student("no-such-model", records, out, TINY, progress=False) == out
    assert ((out / "ledger.jsonl").stat().st_mtime_ns, (out / "DONE").stat().st_mtime_ns) == before


def test_same_seed_same_weights_other_seed_differs(trained, tiny_model_dir):
    records, root, out = trained
    again = train_student(tiny_model_dir, records, root / "s0_again", TINY, progress=False)
    other = train_student(tiny_model_dir, records, root / "s1", replace(TINY, seed=1), progress=False)
    w0, w0b, w1 = _weights(out), _weights(again), _weights(other)
    assert all(torch.equal(w0[k], w0b[k]) for k in w0)
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)
    assert [e["record_ids"] for e in _ledger(out)] == [e["record_ids"] for e in _ledger(again)]
    assert [e["record_ids"] for e in _ledger(out)] != [e["record_ids"] for e in _ledger(other)]


def test_ends_epoch_marks_the_last_step_of_each_epoch():
    from shadow_models.trainer import ends_epoch

    steps = plan_steps(7, 3, 4, seed=0)  # 2 steps per epoch (4 + 3 records)
    assert [ends_epoch(steps, s) for s in steps] == [False, True, False, True, False, True]
    steps = plan_steps(4, 2, 8, seed=0)  # one step per epoch
    assert [ends_epoch(steps, s) for s in steps] == [True, True]


def test_epoch_hook_sees_each_epochs_model_and_changes_no_weight(trained, tiny_model_dir):
    """The hook is called once per epoch, after its last step, with the student as it is then; scoring with it
    under no_grad (as experiments/pass_curve.py does) leaves training bit-identical to a run without the hook."""
    records, root, out = trained
    seen: list[tuple[int, dict[str, torch.Tensor], bool]] = []

    def hook(epoch, model):
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]]))  # a forward, as a scorer would run
        seen.append((epoch, {k: v.detach().clone() for k, v in model.state_dict().items()}, model.training))

    hooked = train_student(tiny_model_dir, records, root / "s0_hooked", TINY, progress=False, epoch_hook=hook)
    assert [e for e, _, _ in seen] == [0, 1]  # 2 epochs of 2 steps each
    w, w_hooked = _weights(out), _weights(hooked)
    assert all(torch.equal(w[k], w_hooked[k]) for k in w)
    last = seen[-1][1]
    assert all(torch.equal(last[k].to(w_hooked[k].dtype), w_hooked[k]) for k in w_hooked if k in last)
    assert any(not torch.equal(seen[0][1][k], last[k]) for k in last)  # epoch 0's model is not the final one


class Interrupt(RuntimeError):
    pass


def _interrupt_at(monkeypatch, step: int) -> None:
    calls = []
    real = sm_optim.apply_update

    def flaky(*args, **kwargs):
        if len(calls) == step:
            raise Interrupt(f"simulated crash at step {step}")
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sm_optim, "apply_update", flaky)


@pytest.mark.parametrize("checkpoints", [False, True])
def test_interrupted_run_leaves_nothing_final_and_rerun_completes(trained, tiny_model_dir, monkeypatch, checkpoints):
    records, root, out = trained
    cfg = replace(TINY, save_checkpoints=checkpoints, checkpoint_every=1)
    target = root / f"crash_{checkpoints}"
    _interrupt_at(monkeypatch, 2)
    with pytest.raises(Interrupt):
        train_student(tiny_model_dir, records, target, cfg, progress=False)
    assert not target.exists() and not is_done(target)
    assert target.with_name(target.name + ".ckpt").exists() == checkpoints
    monkeypatch.undo()
    train_student(tiny_model_dir, records, target, cfg, progress=False)
    assert is_done(target) and not target.with_name(target.name + ".ckpt").exists()
    assert json.loads((target / "meta.json").read_text())["resumed_from_step"] == (2 if checkpoints else 0)
    assert [e["step"] for e in _ledger(target)] == [0, 1, 2, 3]
    w, ref = _weights(target), _weights(out)  # resumed or restarted: identical to the uninterrupted run
    assert all(torch.equal(w[k], ref[k]) for k in ref)


def test_a_student_resumed_under_the_studies_settings_is_the_one_never_stopped(trained, tiny_model_dir, monkeypatch):
    """What the study presets train with (bf16 autocast with a bf16 rollout copy, the teacher's prefix cache,
    micro-batches, fused AdamW), stopped after its third update and resumed with another checkpoint interval (the
    interval is not part of the checkpoint's fingerprint): the same weights and ledger as a run never stopped."""
    records, root, _ = trained
    cfg = replace(TINY, bf16_autocast=True, rollout_bf16_copy=True, teacher_prefix_cache=True, micro_batch_size=2,
                  fused_optimizer=True, save_checkpoints=True, checkpoint_every=1)
    never_stopped = train_student(tiny_model_dir, records, root / "studies_ref", replace(cfg, save_checkpoints=False),
                                  progress=False)
    target = root / "studies_resumed"
    _interrupt_at(monkeypatch, 3)
    with pytest.raises(Interrupt):
        train_student(tiny_model_dir, records, target, cfg, progress=False)
    monkeypatch.undo()
    train_student(tiny_model_dir, records, target, replace(cfg, checkpoint_every=2), progress=False)
    assert json.loads((target / "meta.json").read_text())["resumed_from_step"] == 3
    assert [(e["step"], e["teacher_kl"]) for e in _ledger(target)] == [
        (e["step"], e["teacher_kl"]) for e in _ledger(never_stopped)]
    w, ref = _weights(target), _weights(never_stopped)
    assert all(torch.equal(w[k], ref[k]) for k in ref)


def test_lora_student_saves_adapter_that_load_model_loads(trained, tiny_model_dir):
    from leakaudit.models import load_model

    records, root, _ = trained
    cfg = replace(TINY, lora_rank=4, lora_alpha=8, lora_target_modules=("q_proj", "v_proj"), epochs=1,
                  learning_rate=5e-2, bf16_autocast=True)
    out = train_student(tiny_model_dir, records, root / "lora", cfg, progress=False)
    assert (out / "adapter_model.safetensors").is_file() and (out / "adapter_config.json").is_file()
    assert not (out / "model.safetensors").exists()
    assert all("lora_" in k for k in _weights(out))
    merged, base = load_model(str(out)), load_model(tiny_model_dir)
    assert type(merged).__name__ == "LlamaForCausalLM"
    sd_m, sd_b = merged.state_dict(), base.state_dict()
    changed = [k for k in sd_b if not torch.equal(sd_m[k], sd_b[k])]
    assert changed and all("q_proj" in k or "v_proj" in k for k in changed)
    # self-distillation scores with the base under the disabled adapter: same numbers as a separate base copy
    copy = train_student(tiny_model_dir, records, root / "lora_copy", cfg, teacher_model=tiny_model_dir,
                         progress=False)
    assert _ledger(copy)[0]["teacher_kl"] == pytest.approx(_ledger(out)[0]["teacher_kl"], abs=1e-4)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(_weights(copy).values(), _weights(out).values()))


def test_teacher_prep_then_distil_from_it(trained, tiny_model_dir, sample_records):
    records, root, _ = trained
    cfg = TeacherPrepConfig(epochs=3, batch_size=4, learning_rate=3e-3, bf16_autocast=False, seed=0)
    with pytest.raises(ConfigError):
        prepare_teacher(tiny_model_dir, sample_records, root / "bad", cfg,
                        forbidden_ids=[sample_records[0].record_id], progress=False)
    teacher = prepare_teacher(tiny_model_dir, sample_records, root / "teacher", cfg, progress=False)
    assert is_done(teacher) and (teacher / "model.safetensors").is_file()
    ledger = _ledger(teacher)
    assert len(ledger) == 6 and ledger[-1]["loss"] < ledger[0]["loss"]
    assert json.loads((teacher / "meta.json").read_text())["record_ids"] == [r.record_id for r in sample_records]
    cfg2 = replace(TINY, epochs=1, loss="jsd", beta=0.5, topk=8)
    out = train_student(tiny_model_dir, records[:4], root / "from_teacher", cfg2, teacher_model=str(teacher),
                        progress=False)
    assert len(_ledger(out)) == 1 and math.isfinite(_ledger(out)[0]["teacher_kl"])
    assert json.loads((out / "meta.json").read_text())["teacher_model"] == str(teacher)


def _sft_examples(tokenizer, records):
    from leakaudit.prompting import DEFAULT_TEACHER_TEMPLATE
    from shadow_models.teacher_prep import sft_example

    return [sft_example(tokenizer, r, DEFAULT_TEACHER_TEMPLATE, 64) for r in records]


def test_sft_loss_sum_equals_cross_entropy_over_full_logits(tiny_model_dir, tokenizer, sample_records):
    """Logits restricted to target positions give the same summed cross-entropy as the full (B, L, V) logits."""
    from leakaudit.models import load_model
    from leakaudit.padding import position_ids
    from shadow_models.teacher_prep import n_target_tokens, sft_loss_sum

    model = load_model(tiny_model_dir)
    examples = _sft_examples(tokenizer, sample_records[:3])
    ids, mask = right_pad([e[0] for e in examples], 0, "cpu")
    labels, _ = right_pad([e[1] for e in examples], -100, "cpu")
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits
        logp = torch.log_softmax(full.float(), -1)
        by_hand = sum(-logp[b, t, labels[b, t + 1]] for b in range(len(examples))
                      for t in range(ids.shape[1] - 1) if labels[b, t + 1] != -100)
        got = sft_loss_sum(model, examples, 0, "cpu")
    assert float(got) == pytest.approx(float(by_hand), rel=1e-5)
    assert sum(n_target_tokens(e) for e in examples) == int((labels[:, 1:] != -100).sum())


def test_teacher_sft_micro_batches_give_the_full_batch_gradient(tiny_model_dir, tokenizer, sample_records):
    """Accumulating micro-batches of 1, 3 or 8 sequences gives the gradient and loss of one pass over all 8."""
    import contextlib

    from accelerate import Accelerator

    from leakaudit.models import load_model
    from shadow_models.teacher_prep import accumulate_sft_step

    examples = _sft_examples(tokenizer, sample_records)
    grads, losses = [], []
    for micro in (8, 3, 1):
        model = load_model(tiny_model_dir)
        loss = accumulate_sft_step(Accelerator(), model, examples, 0, "cpu", contextlib.nullcontext(), micro)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        losses.append(loss)
    assert losses[0] > 0 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[2] == pytest.approx(losses[0], rel=1e-5)
    for other in grads[1:]:  # float rounding only: relative error of the whole gradient vector
        assert float((other - grads[0]).norm() / grads[0].norm()) < 1e-5
    with pytest.raises(ConfigError, match="micro_batch_size"):
        TeacherPrepConfig(micro_batch_size=0)


@pytest.mark.slow
def test_real_smollm2_two_steps(tmp_path, sample_records):
    cfg = OPDConfig(batch_size=2, epochs=1, max_new_tokens=16, learning_rate=1e-5, bf16_autocast=True, seed=0)
    out = train_student("smollm2-135m", sample_records[:4], tmp_path / "real", cfg, model_id="real",
                        progress=False)
    ledger = _ledger(out)
    assert len(ledger) == 2 and all(len(e["record_ids"]) == 2 for e in ledger)
    assert all(np.isfinite(e["loss"]) and 1 <= max(e["completion_lengths"]) <= 16 for e in ledger)
    assert all(math.isfinite(e["teacher_kl"]) for e in ledger)
    assert is_done(out) and (out / "model.safetensors").stat().st_size > 100e6
