"""One student trained by several processes (`accelerate launch`, gloo on CPU) equals the single-process student of
the same seed and global batch; only rank 0 writes; a rank killed with SIGKILL leaves a run that resumes; the
teacher's preparation too equals its single-process run; `leakaudit train --model-id` runs under the launcher.

Heavy: each launch starts two Python processes that import torch and transformers and train the tiny model (about
30-60 s per launch on a shared 2-core machine, eight launches: about 4 minutes)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(base: str, out: Path, *extra: str, processes: int = 2) -> subprocess.CompletedProcess:
    """shadow_models.launch_check under `accelerate launch` (processes > 1) or plain python (1)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    script = ["-m", "shadow_models.launch_check", "--base", base, "--out", str(out), *extra]
    if processes == 1:
        cmd = [sys.executable, *script]
    else:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(_free_port()), *script]
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)


def _ledger(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "ledger.jsonl").read_text().splitlines()]


def _max_weight_diff(a: Path, b: Path) -> float:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """The single-process student and the two-process student (rank 1's writes audited)."""
    root = tmp_path_factory.mktemp("mp")
    single = _launch(tiny_model_dir, root / "single", processes=1)
    assert single.returncode == 0, single.stderr[-3000:]
    multi = _launch(tiny_model_dir, root / "multi", "--audit-writes", str(root / "writes"))
    assert multi.returncode == 0, multi.stderr[-3000:]
    return root


@pytest.mark.heavy
def test_two_processes_train_the_student_one_process_trains(runs, tiny_model_dir):
    single, multi = runs / "single", runs / "multi"
    assert json.loads((multi / "meta.json").read_text())["num_processes"] == 2
    assert json.loads((single / "meta.json").read_text())["num_processes"] == 1
    # the students moved (4e-5 on this model), and moved alike (fp32: all-reduce order only)
    assert _max_weight_diff(single, Path(tiny_model_dir)) > 1e-6
    assert _max_weight_diff(single, multi) < 1e-7
    a, b = _ledger(single), _ledger(multi)
    assert [len(e["record_ids"]) for e in a] == [3, 3, 1]  # uneven halves and a rank with no record
    for x, y in zip(a, b, strict=True):
        assert x["record_ids"] == y["record_ids"] and x["completion_lengths"] == y["completion_lengths"]
        for key in ("loss", "teacher_kl", "grad_norm", "lr"):
            assert y[key] == pytest.approx(x[key], rel=1e-4, abs=1e-9), key


@pytest.mark.heavy
def test_only_rank_0_writes(runs):
    """Rank 1 opened nothing for writing, made, renamed or removed nothing beside the output (audit hook)."""
    writes = runs / "writes.1.json"
    assert writes.is_file()  # rank 1 ran and reported
    assert json.loads(writes.read_text()) == []
    assert sorted(p.name for p in runs.iterdir()) == ["multi", "single", "writes.1.json"]  # no .partial, no .ckpt
    assert (runs / "multi" / "DONE").is_file()


@pytest.mark.heavy
def test_a_rank_killed_mid_training_resumes_to_the_same_student(runs, tiny_model_dir, tmp_path):
    out = tmp_path / "killed"
    crashed = _launch(tiny_model_dir, out, "--kill", "1:1")
    assert crashed.returncode != 0
    assert not out.exists() and (tmp_path / "killed.ckpt" / "DONE").is_file()
    resumed = _launch(tiny_model_dir, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["resumed_from_step"] >= 1 and meta["num_processes"] == 2
    assert not (tmp_path / "killed.ckpt").exists() and not (tmp_path / "killed.partial").exists()
    assert _max_weight_diff(out, runs / "multi") < 1e-7
    assert [e["record_ids"] for e in _ledger(out)] == [e["record_ids"] for e in _ledger(runs / "multi")]


def test_record_seeded_rollouts_do_not_depend_on_the_batch(tiny_model_dir):
    """rollout_seeding 'record': a row's tokens depend on its own seed and prompt only, so any split of a batch over
    processes draws the same rollouts; a different seed draws others."""
    from leakaudit.models import LoadOptions, load_model
    from shadow_models.rollout import sample_completions

    model = load_model(tiny_model_dir, LoadOptions(dtype="float32", device="cpu"))
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    kw = dict(max_new_tokens=12, temperature=1.0, top_p=1.0, eos_ids=[0], pad_id=0, seed=0)
    whole = sample_completions(model, prompts, row_seeds=[1, 2, 3], **kw)
    assert sample_completions(model, prompts[1:], row_seeds=[2, 3], **kw) == whole[1:]
    assert sample_completions(model, prompts[:1], row_seeds=[1], **{**kw, "seed": 99}) == whole[:1]
    assert sample_completions(model, prompts[:1], row_seeds=[4], **kw) != whole[:1]
    with pytest.raises(ValueError, match="row_seeds"):
        sample_completions(model, prompts, row_seeds=[1, 2, 3], decoder="generate", **{**kw})


def test_record_seeding_needs_the_loop_decoder():
    from leakaudit.errors import ConfigError
    from shadow_models.config import OPDConfig

    with pytest.raises(ConfigError, match="rollout_seeding"):
        OPDConfig(rollout_seeding="record", rollout_decoder="generate")
    with pytest.raises(ConfigError, match="rollout_seeding"):
        OPDConfig(rollout_seeding="batch")
    assert OPDConfig().rollout_seeding == "step"


@pytest.mark.heavy
def test_two_processes_prepare_the_teacher_one_process_prepares(tmp_path, tiny_model_dir):
    single = _launch(tiny_model_dir, tmp_path / "single", "--teacher", processes=1)
    assert single.returncode == 0, single.stderr[-3000:]
    multi = _launch(tiny_model_dir, tmp_path / "multi", "--teacher", "--audit-writes", str(tmp_path / "writes"))
    assert multi.returncode == 0, multi.stderr[-3000:]
    assert json.loads((tmp_path / "multi" / "meta.json").read_text())["num_processes"] == 2
    assert _max_weight_diff(tmp_path / "single", Path(tiny_model_dir)) > 1e-6
    assert _max_weight_diff(tmp_path / "single", tmp_path / "multi") < 1e-7
    a, b = _ledger(tmp_path / "single"), _ledger(tmp_path / "multi")
    assert [e["record_ids"] for e in a] == [e["record_ids"] for e in b]
    assert [e["loss"] for e in b] == pytest.approx([e["loss"] for e in a], rel=1e-5)
    assert json.loads((tmp_path / "writes.1.json").read_text()) == []


@pytest.mark.heavy
def test_per_process_rollout_streams_are_refused_under_two_processes(tmp_path, tiny_model_dir):
    """rollout_seeding 'step' would make the student depend on the number of processes: refused before any step,
    naming the key, nothing written."""
    res = _launch(tiny_model_dir, tmp_path / "out", "--rollout-seeding", "step")
    assert res.returncode != 0
    assert "training.rollout_seeding='step' under 2 processes" in res.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.heavy
def test_leakaudit_train_under_two_processes_prepares_the_teacher_and_trains(tmp_path, tiny_model_dir):
    """`leakaudit train --model-id` under the launcher: both processes prepare the run's teacher together (no lock
    between them: the first would wait for the second inside the all-reduce), rank 0 measures it, then the student
    is trained by both."""
    from leakaudit.config import load_config
    from leakaudit.study import Study

    cfg = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "name=r",
                                                "teacher.kind=prepared", "teacher.prep.epochs=1",
                                                "teacher.prep.batch_size=3", "training.rollout_seeding=record"])
    Study(cfg, progress=False, log=lambda m: None).run_all(until="plan")
    run = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                          "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                          "--main_process_port", str(_free_port()), "-m", "leakaudit.cli", "train", "--plan",
                          str(run), "--model-id", "math-s0"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    for model in ("_teacher", "math-s0"):
        meta = json.loads((run / "models" / model / "meta.json").read_text())
        assert meta["num_processes"] == 2 and (run / "models" / model / "DONE").is_file()
    assert json.loads((run / "teacher_literalness.json").read_text())["teacher"] == "prepared"
    assert not list(run.rglob("*.partial"))
