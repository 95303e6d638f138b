"""Shared fixtures: the SmolLM2 tokenizer and tiny randomly initialised Llamas that share it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
# bench/'s and experiments/'s scripts import their siblings by name (benchlib, bench_peak, the API test server;
# pool_runs), as they can when run as `python bench/NAME.py`; the tests that load them, or use the test server, need
# both folders on the path as well.
for folder in ("bench", "experiments"):
    if str(REPO / folder) not in sys.path:
        sys.path.append(str(REPO / folder))


def _script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_script(name: str) -> ModuleType:
    """bench/<name>.py (a maintained benchmark) imported as a module (bench/ is not a package)."""
    return _script(REPO / "bench" / f"{name}.py")


def experiment_script(name: str) -> ModuleType:
    """experiments/<name>.py (an analysis script behind docs/results.md) imported as a module."""
    return _script(REPO / "experiments" / f"{name}.py")


@pytest.fixture(scope="session")
def tokenizer():
    from leakaudit.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer, 32-wide random Llama with SmolLM2's tokenizer (49152 tokens); seed 0."""
    from leakaudit.models import make_tiny_llama

    return str(make_tiny_llama(tmp_path_factory.mktemp("tiny0"), seed=0))


@pytest.fixture(scope="session")
def tiny_model_dir_b(tmp_path_factory):
    """Same shape as tiny_model_dir, different random weights (seed 1)."""
    from leakaudit.models import make_tiny_llama

    return str(make_tiny_llama(tmp_path_factory.mktemp("tiny1"), seed=1))


def tiny_study_config(out_root, tiny_model_dir, *extra):
    """The tiny preset on the tiny model, run name e2e under `out_root`, with `--set` style extras."""
    from leakaudit.config import load_config

    return load_config(preset="tiny", overrides=[f"base_model={tiny_model_dir}", f"out_root={out_root}",
                                                 "name=e2e", *extra])


@pytest.fixture(scope="session")
def tiny_study_run(tmp_path_factory, tiny_model_dir):
    """The tiny study run once per session with the local executor: (cfg, root). Shared by test_study_e2e and the
    executor tests (which compare a Ray run against it); tests that edit a run work on a copy."""
    from leakaudit.study import Study

    cfg = tiny_study_config(tmp_path_factory.mktemp("study"), tiny_model_dir)
    root = Study(cfg, progress=False, log=lambda m: None).run_all()
    return cfg, root


@pytest.fixture(scope="module")
def peaked_model(tiny_model_dir):
    """The tiny model with its (tied) embedding scaled up, so next-token distributions are far from uniform."""
    import torch

    from leakaudit.models import load_model

    model = load_model(tiny_model_dir)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(10.0)
    return model


@pytest.fixture
def sample_records():
    from leakaudit.data.records import Record

    return [
        Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}. The answer is {a + b}.", answer=str(a + b),
               source="test")
        for a, b in [(2, 3), (7, 5), (11, 4), (6, 9), (13, 8), (21, 2), (3, 3), (9, 10)]
    ]


@pytest.fixture
def no_code_execution(monkeypatch):
    """exec and eval raise; compile raises unless asked for a syntax tree only (ast.parse calls the builtin compile
    with PyCF_ONLY_AST: an AST, no code object). Returns the list of compile flags seen. Request it after tmp_path
    (fixtures set up in order, and pytest's own setup compiles code)."""
    import ast
    import builtins

    calls: list[int] = []
    real_compile = builtins.compile

    def forbidden(*args, **kwargs):
        raise AssertionError("code was executed")

    def ast_only_compile(source, filename, mode, flags=0, *args, **kwargs):
        calls.append(flags)
        if not flags & ast.PyCF_ONLY_AST:
            raise AssertionError("compile was asked for a code object")
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "compile", ast_only_compile)
    return calls
