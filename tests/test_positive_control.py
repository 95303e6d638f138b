"""Positive control: when students plainly memorise their members, the whole pipeline must detect it.

OPD on a tiny random model moves too little to carry a membership signal, so this test swaps the training
stage for supervised fine-tuning on each member's (student prompt -> privileged text) — planted memorisation —
and checks, end to end through signals, attacks and metrics, that fixed-text attacks separate members from
non-members while the blind text baseline does not. (Measured once: loss, min_k, min_k_plus_plus, lira_online,
rmia 1.0; fresh-trajectory attacks only 0.60-0.71 with 32 sampled tokens and ≈0.5 with 8, because every champ
solution starts with the same "Step-wise solution:" prefix — generic tokens dilute per-token means.) A silent bug anywhere (labels misaligned, references
swapped, sign flipped) would fail it.
"""

from __future__ import annotations

import pandas as pd
import pytest

from leakaudit.config import load_config
from leakaudit.study import Study


def _memorise(base_model, records, out_dir, config, *, teacher_model=None, model_id="", progress=True,
              trust_remote_code=False):
    """Stand-in for train_student: SFT on (student prompt -> privileged text) of the members, saved the same way."""
    import torch

    from leakaudit.io import mark_done, staging_dir
    from leakaudit.models import load_model, load_tokenizer
    from leakaudit.padding import position_ids, right_pad
    from leakaudit.prompting import reference_text_ids, student_prompt_ids

    tok = load_tokenizer(base_model)
    model = load_model(base_model)
    model.train()
    torch.manual_seed(config.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    seqs, labels = [], []
    for r in records:
        p, y = student_prompt_ids(tok, r), reference_text_ids(tok, r)
        seqs.append(p + y)
        labels.append([-100] * len(p) + y)
    ids, mask = right_pad(seqs, tok.pad_token_id)
    lab, _ = right_pad(labels, -100)
    for _ in range(30):
        out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), labels=lab)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    with staging_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        mark_done(tmp, {"final_loss": out.loss.item()})
    return out_dir


@pytest.mark.heavy
def test_planted_memorisation_is_detected(tmp_path, tiny_model_dir, monkeypatch):
    import shadow_models

    memorise = _memorise
    monkeypatch.setattr(shadow_models, "train_student", memorise)
    cfg = load_config(preset="tiny", overrides=[
        f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "name=planted", "data.n_candidates=8",
        "data.n_population=4", "data.max_privileged_tokens=160", "metrics.n_boot=100",
        "signals.sampling.max_new_tokens=32"])
    root = Study(cfg, progress=False, log=lambda m: None).run_all()
    m = pd.read_csv(root / "metrics.csv")
    pooled = m[(m.level == "domain") & ~m.null_check].set_index("attack")["auroc"]
    assert pooled["loss"] > 0.9, pooled.to_dict()
    assert pooled["ref_ratio_refs"] > 0.9, pooled.to_dict()
    assert pooled["lira_online"] > 0.8, pooled.to_dict()
    assert 0.2 < pooled["blind_text"] < 0.8, pooled.to_dict()
    null = m[(m.level == "domain") & m.null_check].set_index("attack")["auroc"]
    assert 0.2 < null["loss"] < 0.8, null.to_dict()
