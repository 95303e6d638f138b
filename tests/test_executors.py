"""Executors: the local and Ray executors run every job and report each failure with its id; a Ray run
of the tiny study equals the local one; a raising job and a SIGKILLed worker are reported and the rerun resumes."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from leakaudit.executors import (FAULT_ENV, Job, JobsFailed, LocalExecutor, RunDirNotVisible, call_job,
                                 check_visible)

ECHO = "leakaudit.executors:echo_job"


def test_local_executor_runs_every_job_and_reports_each_failure(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "raise@start:b")
    out = LocalExecutor(log=lambda m: None).run_jobs([Job(j, ECHO, {"x": i}) for i, j in enumerate("abc")],
                                                     stage="t")
    assert {k: v["x"] for k, v in out.results.items()} == {"a": 0, "c": 2}
    assert [(f.job_id, f.error) for f in out.failures] == [("b", "RuntimeError: injected fault at start of b")]
    err = JobsFailed("students", out.failures, 3)
    assert "1 of 3 jobs failed" in str(err) and "  b: RuntimeError: injected fault at start of b" in str(err)


def test_cli_names_every_failed_job_and_exits_1(monkeypatch, capsys):
    from leakaudit.cli import main
    from leakaudit.executors import JobFailure
    from leakaudit.study import Study

    def failing(self):
        raise JobsFailed("students", [JobFailure("math-s1", "RuntimeError: out of memory"),
                                      JobFailure("math-s2", "worker died (WorkerCrashedError: ...)")], 5)

    monkeypatch.setattr(Study, "run_all", failing)
    assert main(["run-study", "--preset", "tiny"]) == 1
    err = capsys.readouterr().err
    assert "error: students: 2 of 5 jobs failed" in err
    assert "  math-s1: RuntimeError: out of memory\n  math-s2: worker died (WorkerCrashedError: ...)" in err


def test_a_worker_that_cannot_see_the_run_directory_says_so(tmp_path):
    probe = {"path": str(tmp_path / "run" / ".executor_probe.json"), "token": "t0"}
    with pytest.raises(RunDirNotVisible, match=r"node .* cannot see the run directory .*run: .* must be on a "
                                               r"filesystem every Ray worker sees"):
        call_job("a", ECHO, {}, probe=probe)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".executor_probe.json").write_text(json.dumps({"token": "t0"}))
    check_visible(probe)  # visible: no error


def test_ray_requested_but_not_installed_is_a_config_error(monkeypatch, tmp_path):
    import importlib.util

    from leakaudit.cli import main
    from leakaudit.config import load_config
    from leakaudit.errors import ConfigError
    from leakaudit.executors import make_executor

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    cfg = load_config(preset="tiny", overrides=["execution.backend=ray"])
    with pytest.raises(ConfigError, match=r"execution.backend: 'ray' needs the ray package"):
        make_executor(cfg.execution, tmp_path)
    assert main(["run-study", "--preset", "tiny", "--set", f"out_root={tmp_path}", "--set",
                 "execution.backend=ray"]) == 2
    assert not (tmp_path / "tiny").exists()  # refused before the run directory is written


# ---- Ray: one local instance for the module -------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    import torch

    # Ray gives a task OMP_NUM_THREADS = its num_cpus: ask for this process's torch thread count so workers compute
    # with as many threads as the local run did (reduction order, hence every float, then matches)
    threads = torch.get_num_threads()
    ray.init(num_cpus=max(2, threads), include_dashboard=False, log_to_driver=False)
    yield threads
    ray.shutdown()


@pytest.mark.current_deps
def test_ray_executor_reports_a_raising_job_and_a_killed_worker(ray_instance, tmp_path, monkeypatch):
    from leakaudit.config import ExecutionConfig
    from leakaudit.executors import RayExecutor

    monkeypatch.setenv(FAULT_ENV, "raise@start:b,kill@start:c")
    # 2 CPUs per job (the instance has >= 2): Ray sets a worker's OMP_NUM_THREADS from them unless the driver's
    # environment sets it (then the worker inherits that: 1 under `OMP_NUM_THREADS=1`; unset under make test)
    ex = RayExecutor(ExecutionConfig(backend="ray", gpus_per_student=0, cpus_per_student=2), tmp_path / "run",
                     log=lambda m: None)
    out = ex.run_jobs([Job(j, ECHO, {"x": i}) for i, j in enumerate("abcd")], stage="t")
    assert {k: v["x"] for k, v in out.results.items()} == {"a": 0, "d": 3}
    assert out.results["a"]["omp_num_threads"] == os.environ.get("OMP_NUM_THREADS", "2")
    errors = {f.job_id: f.error for f in out.failures}
    assert errors["b"] == "RuntimeError: injected fault at start of b"
    assert errors["c"].startswith("worker died (")
    ex.close()  # joined the test's instance: leaves it running
    import ray

    assert ray.is_initialized()


@pytest.mark.current_deps
def test_each_ray_job_gets_a_fresh_worker_process_unless_told_to_reuse(ray_instance, tmp_path):
    """jobs_per_worker=1 (the default, Ray's max_calls) ends a worker after its job, so what a student held goes back
    to the OS (a reused worker kept 8.5 GB after a student and Ray's OOM killer took two students of a cpu-full shard);
    0 lets Ray reuse its workers. Each job asks for every CPU of the instance, so the four run one after another."""
    import ray

    from leakaudit.config import ExecutionConfig
    from leakaudit.executors import RayExecutor

    cpus = ray.cluster_resources()["CPU"]

    def pids(jobs_per_worker):
        ex = RayExecutor(ExecutionConfig(backend="ray", gpus_per_student=0, cpus_per_student=cpus,
                                         jobs_per_worker=jobs_per_worker), tmp_path / f"run{jobs_per_worker}",
                         log=lambda m: None)
        out = ex.run_jobs([Job(j, ECHO, {}) for j in "abcd"], stage="t")
        assert not out.failures
        return [out.results[j]["pid"] for j in "abcd"]

    assert len(set(pids(1))) == 4
    assert len(set(pids(0))) < 4  # Ray reuses an idle worker when allowed to: the option is what makes them differ


@pytest.mark.current_deps
def test_each_ray_job_runs_under_the_allocator_policy_of_the_config(ray_instance, tmp_path):
    """execution.allocator reaches every Ray worker (the driver's mallopt does not: workers are other processes):
    under 'reuse' a job's freed 64 MB block is written again without faulting in (16384 pages under glibc's
    defaults); under 'system' the worker keeps glibc's defaults. One fresh worker per job (jobs_per_worker=1)."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    from leakaudit.config import ExecutionConfig
    from leakaudit.executors import RayExecutor

    def refaults(policy):
        ex = RayExecutor(ExecutionConfig(backend="ray", gpus_per_student=0, cpus_per_student=1, allocator=policy),
                         tmp_path / policy, log=lambda m: None)
        out = ex.run_jobs([Job("a", "leakaudit.memory:allocator_probe_job", {})], stage="t")
        assert not out.failures
        return out.results["a"]["refaulted_pages"], out.results["a"]["pages"]

    (reuse, pages), (system, _) = refaults("reuse"), refaults("system")
    assert reuse <= pages // 100
    assert system > max(reuse, 16)


def test_call_job_sets_the_allocator_policy_it_is_given(monkeypatch):
    from leakaudit.executors import jobs

    seen = []
    monkeypatch.setattr(jobs, "set_allocator_policy", seen.append)  # where call_job looks it up
    assert call_job("a", ECHO, {"x": 1}, allocator="reuse")["x"] == 1
    assert call_job("b", ECHO, {"x": 2})["x"] == 2  # none given (the local executor: the driver set it already)
    assert seen == ["reuse"]


@pytest.mark.current_deps
def test_ray_worker_without_the_run_directory_fails_clearly(ray_instance, tmp_path):
    import ray

    probe = {"path": str(tmp_path / "elsewhere" / ".executor_probe.json"), "token": "t"}
    with pytest.raises(ray.exceptions.RayTaskError) as e:
        ray.get(ray.remote(call_job).options(num_cpus=1).remote("a", ECHO, {}, None, probe), timeout=60)
    assert isinstance(e.value.cause, RunDirNotVisible) and str(tmp_path / "elsewhere") in str(e.value.cause)


@pytest.mark.current_deps
def test_gpus_the_cluster_lacks_are_refused_not_waited_for(ray_instance, tmp_path):
    from leakaudit.config import ExecutionConfig
    from leakaudit.errors import ConfigError
    from leakaudit.executors import RayExecutor

    ex = RayExecutor(ExecutionConfig(backend="ray", gpus_per_student=1), tmp_path, log=lambda m: None)
    with pytest.raises(ConfigError, match=r"execution.gpus_per_student: each job asks for 1 GPUs but the Ray "
                                          r"cluster has 0"):
        ex.run_jobs([Job("a", ECHO, {})], stage="t")


def _same_run_elsewhere(tiny_study_run, tmp_path, tiny_model_dir, *execution):
    """(cfg, its run directory, the in-process run's directory): the tiny study under other `execution` overrides,
    which leave its identity (the config hash) unchanged."""
    from conftest import tiny_study_config

    local_cfg, local_root = tiny_study_run
    cfg = tiny_study_config(tmp_path, tiny_model_dir, *execution)
    assert cfg.hash() == local_cfg.hash()
    return cfg, cfg.run_dir, local_root


def _mtimes(root, ids):
    return {m: (root / "models" / m / "DONE").stat().st_mtime_ns for m in ids}


@pytest.mark.current_deps
def test_tiny_study_on_ray_fails_per_job_resumes_and_equals_the_local_run(ray_instance, tiny_study_run, tmp_path,
                                                                          tiny_model_dir, monkeypatch):
    """Run 1: student math-s1 raises, math-s2's worker is SIGKILLed after its first step -> both reported by id,
    no complete-looking directory for either. Run 2: sampling for math-s0 raises -> reported as sample:math-s0.
    Run 3 completes, retraining only the two failed students; scores and metrics equal the local run's."""
    from leakaudit.study import Study

    cfg, root, local_root = _same_run_elsewhere(tiny_study_run, tmp_path, tiny_model_dir, "execution.backend=ray",
                                                "execution.gpus_per_student=0",
                                                f"execution.cpus_per_student={ray_instance}")
    logs: list[str] = []

    monkeypatch.setenv(FAULT_ENV, "raise@start:math-s1,kill@step:math-s2")
    with pytest.raises(JobsFailed) as e:
        Study(cfg, progress=False, log=logs.append).run_all()
    errors = {f.job_id: f.error for f in e.value.failures}
    assert set(errors) == {"math-s1", "math-s2"} and e.value.stage == "students"
    assert errors["math-s1"] == "RuntimeError: injected fault at start of math-s1"
    assert errors["math-s2"].startswith("worker died")
    assert any(m.startswith("[students] math-s2 failed: worker died") for m in logs)
    assert not (root / "models" / "math-s1").exists() and not (root / "models" / "math-s2").exists()
    assert (root / "models" / "math-s2.partial" / "ledger.jsonl").is_file()  # killed mid-way, after a step
    kept = ["math-s0", "math-s3", "math-null"]
    before = _mtimes(root, kept)

    monkeypatch.setenv(FAULT_ENV, "raise@start:sample:math-s0")
    with pytest.raises(JobsFailed) as e:
        Study(cfg, progress=False, log=logs.append).run_all()
    assert [(f.job_id, f.error) for f in e.value.failures] == [
        ("sample:math-s0", "RuntimeError: injected fault at start of sample:math-s0")]
    assert _mtimes(root, kept) == before

    monkeypatch.delenv(FAULT_ENV)
    Study(cfg, progress=False, log=logs.append).run_all()
    assert _mtimes(root, kept) == before  # the rerun trained only what was missing
    assert not list((root / "models").glob("*.partial"))
    pd.testing.assert_frame_equal(pd.read_parquet(root / "scores.parquet"),
                                  pd.read_parquet(local_root / "scores.parquet"))
    assert (root / "metrics.csv").read_text() == (local_root / "metrics.csv").read_text()
    ours, theirs = (json.loads((r / "metrics.json").read_text()) for r in (root, local_root))
    for provenance in ("date", "config", "env", "versions"):  # when and where it ran, and the execution section
        ours.pop(provenance), theirs.pop(provenance)
    assert ours == theirs


@pytest.mark.current_deps
def test_a_study_asking_for_gpus_the_cluster_lacks_writes_nothing(ray_instance, tmp_path, tiny_model_dir):
    """Bug: the GPU check ran at the students stage's first job, after the records, plan and teacher stages had
    written the run directory (20 minutes of teacher on the real model). Now prepare() refuses it: exit 2, and no
    run directory. The same for CPUs."""
    from conftest import tiny_study_config
    from leakaudit.errors import ConfigError
    from leakaudit.study import Study

    for override, resource in (("execution.gpus_per_student=1", "GPUs"),
                               ("execution.cpus_per_student=64", "CPUs")):
        cfg = tiny_study_config(tmp_path, tiny_model_dir, "execution.backend=ray", "execution.gpus_per_student=0",
                                override)
        with pytest.raises(ConfigError, match=rf"execution\.\w+_per_student: each job asks for \d+ {resource} but "
                                              r"the Ray cluster has"):
            Study(cfg, progress=False, log=lambda m: None).run_all()
        assert not cfg.run_dir.exists()


def test_local_processes_run_every_job_at_their_threads_and_report_a_raise_and_a_kill(monkeypatch):
    """execution.local_workers > 1: each job in a process of its own (a pid other than ours), at cores // workers
    threads; a raising job and a SIGKILLed one are reported by id and every other job still runs."""
    from leakaudit.executors import LocalProcessExecutor

    monkeypatch.setenv(FAULT_ENV, "raise@start:b,kill@start:c")
    executor = LocalProcessExecutor(2, cores=4, log=lambda m: None)
    seen = []

    class Bar:
        def update(self, done, running, failed):
            seen.append(running)

    out = executor.run_jobs([Job(j, ECHO, {"x": i}) for i, j in enumerate("abcde")], stage="t", progress=Bar())
    assert {k: v["x"] for k, v in out.results.items()} == {"a": 0, "d": 3, "e": 4}
    assert {(v["omp_num_threads"], v["torch_threads"]) for v in out.results.values()} == {("2", 2)}
    assert os.getpid() not in {v["pid"] for v in out.results.values()}
    assert len({v["pid"] for v in out.results.values()}) == 3  # a fresh process per job
    errors = dict((f.job_id, f.error) for f in out.failures)
    assert errors["b"] == "RuntimeError: injected fault at start of b"
    assert errors["c"].startswith("worker died") and "killed by signal 9" in errors["c"]
    assert set(errors) == {"b", "c"} and max(seen) == 2  # never more than `workers` at once


def test_local_workers_pick_the_executor_and_must_be_positive(tmp_path):
    from leakaudit.config import ExecutionConfig
    from leakaudit.errors import ConfigError
    from leakaudit.executors import LocalProcessExecutor, make_executor

    assert isinstance(make_executor(ExecutionConfig(), tmp_path), LocalExecutor)
    two = make_executor(ExecutionConfig(local_workers=2), tmp_path)
    assert isinstance(two, LocalProcessExecutor) and not two.in_process and LocalExecutor.in_process
    with pytest.raises(ConfigError, match="execution.local_workers: must be >= 1, got 0"):
        ExecutionConfig(local_workers=0)


@pytest.mark.heavy
def test_tiny_study_in_local_processes_resumes_after_a_kill_and_equals_the_in_process_run(
        tiny_study_run, tmp_path, tiny_model_dir, monkeypatch):
    """Two local processes at once: student math-s2's process is SIGKILLed after its first step -> reported by id,
    the other students finish; the rerun trains only math-s2 and the scores and metrics equal the in-process run's
    (the execution section is left out of the config hash, so both are one run)."""
    import torch

    import leakaudit.executors.local
    from leakaudit.study import Study

    # as many threads per job as the in-process run used (reduction order, hence every float, then matches)
    monkeypatch.setattr(leakaudit.executors.local, "usable_cpus", lambda: 2 * torch.get_num_threads())
    cfg, root, local_root = _same_run_elsewhere(tiny_study_run, tmp_path, tiny_model_dir, "execution.local_workers=2")
    logs: list[str] = []
    monkeypatch.setenv(FAULT_ENV, "kill@step:math-s2")
    with pytest.raises(JobsFailed) as e:
        Study(cfg, progress=False, log=logs.append).run_all()
    assert [f.job_id for f in e.value.failures] == ["math-s2"]
    assert e.value.failures[0].error.startswith("worker died")
    assert not (root / "models" / "math-s2").exists()
    kept = ["math-s0", "math-s1", "math-s3", "math-null"]
    before = _mtimes(root, kept)

    monkeypatch.delenv(FAULT_ENV)
    Study(cfg, progress=False, log=logs.append).run_all()
    assert _mtimes(root, kept) == before
    pd.testing.assert_frame_equal(pd.read_parquet(root / "scores.parquet"),
                                  pd.read_parquet(local_root / "scores.parquet"))
    assert (root / "metrics.csv").read_text() == (local_root / "metrics.csv").read_text()
