"""Shared fixtures: the SmolLM2 tokenizer and tiny randomly initialised Llamas that share it."""

from __future__ import annotations

import pytest


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
