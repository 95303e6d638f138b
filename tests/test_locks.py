"""Locks between processes (leakaudit.locks): one process per run directory, one maker of a shared artefact."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from filelock import FileLock

from leakaudit.cli import main
from leakaudit.errors import LeakauditError
from leakaudit.io import is_done, mark_done, partial_dir
from leakaudit.locks import RUN_LOCK, lock_path, made_once, run_exclusively


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_a_run_held_by_another_process_is_refused_with_exit_2_and_nothing_written(tmp_path, tiny_model_dir, capsys):
    root = tmp_path / "e2e"
    root.mkdir()
    holder = FileLock(str(root / RUN_LOCK))
    holder.acquire()
    try:
        rc = main(["run-study", "--preset", "tiny", "--set", f"base_model={tiny_model_dir}",
                   "--set", f"out_root={tmp_path}", "--set", "name=e2e"])
    finally:
        holder.release()
    assert rc == 2
    err = capsys.readouterr().err
    assert "another leakaudit process is running this study" in err and str(root) in err
    assert _files(root) == [RUN_LOCK]


def test_a_run_lock_is_released_when_its_holder_is_killed(tmp_path):
    """kill -9 leaves no stale lock: the kernel drops the holder's flock, so the rerun resumes."""
    code = ("import sys, time; from leakaudit.locks import run_exclusively\n"
            f"with run_exclusively({str(tmp_path)!r}):\n    print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LeakauditError, match="another leakaudit process"):
            with run_exclusively(tmp_path):
                pass
    finally:
        proc.kill()
        proc.wait()
    with run_exclusively(tmp_path):  # at once, no timeout to wait out
        pass


def test_the_offline_model_is_dequantised_once_when_two_processes_ask(tmp_path, monkeypatch):
    """While another process holds the model's lock (it is de-quantising), materialise_gguf waits and then uses
    that process's checkpoint instead of starting its own (which deleted the other's work in progress)."""
    from leakaudit.models import materialise_gguf

    monkeypatch.setenv("LEAKAUDIT_CACHE", str(tmp_path))
    target = tmp_path / "models" / "smollm2-135m"
    target.parent.mkdir(parents=True)  # filelock 3.10.0 (the floor) does not create the directory
    other = FileLock(str(lock_path(target)))
    other.acquire()
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("dir", materialise_gguf("smollm2-135m")))
    try:
        waiter.start()
        time.sleep(1.0)
        assert waiter.is_alive() and not partial_dir(target).exists()  # waiting, not de-quantising
        target.mkdir(parents=True)  # what the other process leaves when it finishes
        (target / "made_by").write_text("the other process")
        mark_done(target)
    finally:
        other.release()
    waiter.join(60)
    assert got["dir"] == target and (target / "made_by").read_text() == "the other process"


def test_made_once_serialises_makers(tmp_path):
    """Two makers of one target: the second enters only after the first has left, and finds the work done."""
    target = tmp_path / "teacher"
    events = []

    def make(name):
        with made_once(target):
            events.append((name, "in", is_done(target)))
            if not is_done(target):
                time.sleep(0.3)
                target.mkdir()
                mark_done(target)
            events.append((name, "out", True))

    threads = [threading.Thread(target=make, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(10)
    assert [e[:2] for e in events] == [("a", "in"), ("a", "out"), ("b", "in"), ("b", "out")]
    assert events[0][2] is False and events[2][2] is True


def test_a_job_waits_for_the_job_preparing_the_runs_teacher(tmp_path, tiny_model_dir):
    """`leakaudit train --model-id` jobs of one run each call stage_teacher: while one job prepares the teacher
    (it holds the teacher's lock) another waits, then takes that teacher instead of preparing its own over it."""
    import shutil

    from leakaudit.config import load_config
    from leakaudit.study import Study

    cfg = load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={tmp_path}", "name=jobs",
                                                "teacher.kind=prepared", "teacher.prep={epochs: 1, batch_size: 4}"])
    first = Study(cfg, progress=False, log=lambda m: None)
    first.prepare()
    first._write_header()
    first.run_stage("records")
    first.run_stage("plan")
    teacher = first.run.teacher
    teacher.parent.mkdir(parents=True, exist_ok=True)  # filelock 3.10.0 (the floor) does not create the directory
    other = FileLock(str(lock_path(teacher)))
    other.acquire()
    second = Study(cfg, progress=False, log=lambda m: None)
    job = threading.Thread(target=second.run_stage, args=("teacher",))
    try:
        job.start()
        time.sleep(1.0)
        assert job.is_alive() and not partial_dir(teacher).exists()  # waiting, not preparing
        shutil.copytree(tiny_model_dir, teacher)  # the teacher the other job leaves (any model of that shape)
        (teacher / "made_by").write_text("the other job")
        (teacher / "meta.json").write_text("{}")  # prepare_teacher's record of its SFT (read by the measurement)
        mark_done(teacher)
    finally:
        other.release()
    job.join(120)
    assert (teacher / "made_by").read_text() == "the other job"
    assert first.run.teacher_literalness.is_file()  # the waiting job measured the teacher it found
