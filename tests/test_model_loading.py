"""Model loading: a hub id that does not exist fails at once without a network, pickled
weights are refused everywhere a model directory is loaded, and `trust_remote_code` reaches every load."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from leakaudit.errors import InputError

NO_SUCH_MODEL = "leakaudit-tests/no-such-model-0d81e5c"


# ---------------------------------------------------------------- hub ids without a network
@pytest.fixture
def closed_hub(monkeypatch):
    """The hub endpoint is a closed local port: every connection is refused (as with no network)."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def offline_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _loaders():
    from leakaudit.models import load_model, load_tokenizer, resolve_model_ref

    return {"resolve_model_ref": resolve_model_ref, "load_tokenizer": load_tokenizer, "load_model": load_model}


@pytest.mark.parametrize("hub", ["closed_hub", "offline_hub"])
@pytest.mark.parametrize("loader", ["resolve_model_ref", "load_tokenizer", "load_model"])
def test_unknown_hub_model_fails_at_once_without_network(request, hub, loader):
    request.getfixturevalue(hub)
    start = time.monotonic()
    with pytest.raises(InputError, match=NO_SUCH_MODEL) as info:
        _loaders()[loader](NO_SUCH_MODEL)
    assert time.monotonic() - start < 10
    assert "not in the local Hugging Face cache" in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_hub_model_fails_at_once_in_the_hf_backend(closed_hub):
    from leakaudit.signals.backend import open_backend

    start = time.monotonic()
    with pytest.raises(InputError, match=NO_SUCH_MODEL):
        with open_backend("transformers", NO_SUCH_MODEL):
            pass
    assert time.monotonic() - start < 10


def test_cached_hub_model_is_used_when_the_hub_is_unreachable(closed_hub, monkeypatch, tmp_path):
    """A warm HF cache keeps working offline: the snapshot directory is returned, without retries."""
    import huggingface_hub

    snapshot = tmp_path / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}", encoding="utf-8")
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo_id, filename, **kw: str(snapshot / filename) if repo_id == NO_SUCH_MODEL else None)
    from leakaudit.models import resolve_model_ref

    start = time.monotonic()
    assert resolve_model_ref(NO_SUCH_MODEL) == str(snapshot)
    assert time.monotonic() - start < 10


# ---------------------------------------------------------------- pickled weights are refused
@pytest.fixture(scope="module")
def pickle_model_dir(tmp_path_factory, tiny_model_dir):
    """tiny_model_dir with its weights as pytorch_model.bin (a pickle) and no safetensors; tokenizer kept."""
    import torch
    from safetensors.torch import load_file

    out = tmp_path_factory.mktemp("pickled")
    for f in Path(tiny_model_dir).iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, out / f.name)
    state = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    torch.save(state, out / "pytorch_model.bin")
    return str(out)


@pytest.fixture(scope="module")
def pickle_adapter_dir(tmp_path_factory, tiny_model_dir):
    """A LoRA adapter over tiny_model_dir saved as adapter_model.bin (a pickle)."""
    from peft import LoraConfig, get_peft_model

    from leakaudit.models import load_model

    model = get_peft_model(load_model(tiny_model_dir), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"],
                                                                  task_type="CAUSAL_LM"))
    out = tmp_path_factory.mktemp("pickled_adapter")
    model.save_pretrained(out, safe_serialization=False)
    model.get_base_model().config.save_pretrained(out)
    assert (out / "adapter_model.bin").is_file() and not (out / "adapter_model.safetensors").exists()
    return str(out)


def _records():
    from leakaudit.data.records import Record

    return [Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}.", answer=str(a + b), source="test")
            for a, b in [(2, 3), (7, 5)]]


def _opd(**kw):
    from shadow_models import OPDConfig

    return OPDConfig(**{"batch_size": 2, "epochs": 1, "max_new_tokens": 2, "learning_rate": 1e-3, "seed": 0,
                        "bf16_autocast": False, **kw})


def _prep(**kw):
    from shadow_models import TeacherPrepConfig

    return TeacherPrepConfig(**{"epochs": 1, "batch_size": 2, "learning_rate": 1e-3, "bf16_autocast": False,
                                "seed": 0, **kw})


PICKLE_MESSAGE = r"weights in safetensors only: .* holds pytorch_model\.bin"


def test_load_model_refuses_pytorch_model_bin(pickle_model_dir):
    from leakaudit.models import load_model

    with pytest.raises(InputError, match=PICKLE_MESSAGE):
        load_model(pickle_model_dir)


def test_tokenizer_only_load_of_a_pickle_dir_is_fine(pickle_model_dir):
    from leakaudit.models import load_tokenizer

    assert load_tokenizer(pickle_model_dir).pad_token is not None


def test_signal_backends_refuse_pytorch_model_bin(pickle_model_dir):
    from leakaudit.signals.backend import open_backend

    with pytest.raises(InputError, match=PICKLE_MESSAGE):
        with open_backend("transformers", pickle_model_dir):
            pass


def test_training_refuses_a_pickled_base_and_a_pickled_teacher(tmp_path, pickle_model_dir, tiny_model_dir):
    from shadow_models import train_student

    with pytest.raises(InputError, match=PICKLE_MESSAGE):
        train_student(pickle_model_dir, _records(), tmp_path / "s0", _opd(), progress=False)
    with pytest.raises(InputError, match=PICKLE_MESSAGE):
        train_student(tiny_model_dir, _records(), tmp_path / "s1", _opd(), teacher_model=pickle_model_dir,
                      progress=False)
    assert not (tmp_path / "s0").exists() and not (tmp_path / "s1").exists()


def test_teacher_prep_refuses_a_pickled_base(tmp_path, pickle_model_dir):
    from shadow_models import prepare_teacher

    with pytest.raises(InputError, match=PICKLE_MESSAGE):
        prepare_teacher(pickle_model_dir, _records(), tmp_path / "teacher", _prep(), progress=False)
    assert not (tmp_path / "teacher").exists()


def test_lora_adapter_model_bin_is_refused_before_unpickling(pickle_adapter_dir, monkeypatch):
    import torch

    from leakaudit.models import load_model

    def no_unpickling(*a, **k):
        raise AssertionError("torch.load called on a pickled adapter")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(InputError, match=r"weights in safetensors only: .* holds adapter_model\.bin"):
        load_model(pickle_adapter_dir)


def test_lora_adapter_over_a_pickled_base_is_refused(tmp_path, pickle_model_dir, tiny_model_dir):
    import json

    from peft import LoraConfig, get_peft_model

    from leakaudit.models import load_model

    model = get_peft_model(load_model(tiny_model_dir), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"],
                                                                  task_type="CAUSAL_LM"))
    out = tmp_path / "adapter"
    model.save_pretrained(out, safe_serialization=True)
    model.get_base_model().config.save_pretrained(out)  # as shadow_models.modeling.save_student does
    cfg = json.loads((out / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = pickle_model_dir
    (out / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=PICKLE_MESSAGE):
        load_model(str(out))


def test_safetensors_dirs_still_load(tiny_model_dir):
    from leakaudit.models import check_safetensors_only, load_model

    check_safetensors_only(tiny_model_dir)
    assert load_model(tiny_model_dir) is not None


# ---------------------------------------------------------------- trust_remote_code reaches every load
@pytest.fixture
def recorded_loads(monkeypatch):
    """Wrap the transformers / peft loaders: record (loader, trust_remote_code) of each call, then load."""
    import transformers
    from peft import AutoPeftModelForCausalLM

    calls: list[tuple[str, object]] = []
    for name, cls in (("model", transformers.AutoModelForCausalLM), ("tokenizer", transformers.AutoTokenizer),
                      ("config", transformers.AutoConfig), ("peft", AutoPeftModelForCausalLM)):
        original = cls.from_pretrained

        def wrapper(*args, _name=name, _original=original, **kwargs):
            calls.append((_name, kwargs.get("trust_remote_code", "absent")))
            return _original(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", wrapper)
    return calls


def _flags(calls, *names):
    return [flag for name, flag in calls if name in names]


@pytest.mark.parametrize("trust", [False, True])
def test_trust_remote_code_reaches_the_model_loaders(recorded_loads, tiny_model_dir, trust):
    from leakaudit.models import load_model, load_tokenizer

    load_tokenizer(tiny_model_dir, trust_remote_code=trust)
    load_model(tiny_model_dir, trust_remote_code=trust)
    assert _flags(recorded_loads, "model") == [trust] and _flags(recorded_loads, "tokenizer") == [trust]


def test_trust_remote_code_defaults_to_false_everywhere(recorded_loads, tmp_path, tiny_model_dir):
    from leakaudit.signals.backend import open_backend
    from shadow_models import prepare_teacher, train_student

    with open_backend("transformers", tiny_model_dir):
        pass
    train_student(tiny_model_dir, _records(), tmp_path / "s", _opd(), progress=False)
    prepare_teacher(tiny_model_dir, _records(), tmp_path / "t", _prep(), progress=False)
    assert recorded_loads and all(flag is False for _, flag in recorded_loads), recorded_loads


def test_trust_remote_code_reaches_the_hf_backend(recorded_loads, tiny_model_dir):
    from leakaudit.signals.backend import make_backend, open_backend

    with open_backend("transformers", tiny_model_dir, trust_remote_code=True):
        pass
    make_backend("transformers", tiny_model_dir, trust_remote_code=True)
    assert _flags(recorded_loads, "model") == [True, True]


def test_trust_remote_code_reaches_training_student_and_teacher(recorded_loads, tmp_path, tiny_model_dir,
                                                                tiny_model_dir_b):
    from shadow_models import train_student

    train_student(tiny_model_dir, _records(), tmp_path / "s", _opd(), teacher_model=tiny_model_dir_b,
                  progress=False, trust_remote_code=True)
    assert _flags(recorded_loads, "model") == [True, True]  # student, teacher
    assert _flags(recorded_loads, "tokenizer") and set(_flags(recorded_loads, "tokenizer")) == {True}


def test_trust_remote_code_reaches_teacher_prep(recorded_loads, tmp_path, tiny_model_dir):
    from shadow_models import prepare_teacher

    prepare_teacher(tiny_model_dir, _records(), tmp_path / "t", _prep(), progress=False, trust_remote_code=True)
    assert _flags(recorded_loads, "model") == [True]
    assert set(_flags(recorded_loads, "tokenizer")) == {True}


def test_trust_remote_code_reaches_a_lora_student_load(recorded_loads, tmp_path, tiny_model_dir):
    from leakaudit.models import load_model
    from shadow_models import train_student

    out = train_student(tiny_model_dir, _records(), tmp_path / "lora", _opd(lora_rank=2, lora_alpha=4),
                        progress=False, trust_remote_code=True)
    recorded_loads.clear()
    load_model(str(out), trust_remote_code=True)
    assert _flags(recorded_loads, "peft") == [True]
    assert set(_flags(recorded_loads, "model")) <= {True}


def test_a_bare_hub_id_is_a_hub_reference(offline_hub, monkeypatch, tmp_path):
    """'gpt2' (no owner) is a hub id, as from_pretrained takes it: looked up in the cache, named when absent."""
    import huggingface_hub

    from leakaudit.models import resolve_model_ref

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename, **kw: None)
    with pytest.raises(InputError, match=r"model 'gpt2' is not a local directory, offline mode is on"):
        resolve_model_ref("gpt2")
    snapshot = tmp_path / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}", encoding="utf-8")
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo_id, filename, **kw: str(snapshot / filename) if repo_id == "gpt2" else None)
    assert resolve_model_ref("gpt2") == str(snapshot)
    with pytest.raises(InputError, match="unknown model reference"):
        resolve_model_ref("not a model!")  # not a hub id, not a path
def test_a_model_load_prints_no_transformers_progress_bar_and_restores_its_settings(tiny_model_dir, capfd):
    """A study loads a model per job: transformers' own "Loading weights" bar and messages stay out of its log."""
    from transformers.utils import logging as hf_logging

    from leakaudit.models import load_model

    hf_logging.enable_progress_bar()
    before = hf_logging.get_verbosity()
    capfd.readouterr()
    load_model(str(tiny_model_dir))
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err and "it/s" not in err
    assert hf_logging.is_progress_bar_enabled() and hf_logging.get_verbosity() == before


def test_saving_a_student_prints_no_transformers_progress_bar(tiny_model_dir, tmp_path, capfd):
    """Every trained student and reference is saved once: transformers' "Writing model shards" bar stayed in a
    study's log (one per model, with its carriage returns) until saving went through quiet_transformers too."""
    from transformers.utils import logging as hf_logging

    from leakaudit.models import load_model, load_tokenizer
    from shadow_models.modeling import save_student

    model, tok = load_model(str(tiny_model_dir)), load_tokenizer(str(tiny_model_dir))
    hf_logging.enable_progress_bar()
    capfd.readouterr()
    save_student(model, tok, tmp_path / "student")
    out, err = capfd.readouterr()
    assert "Writing model shards" not in out + err and "it/s" not in err
    assert (tmp_path / "student" / "model.safetensors").is_file() and hf_logging.is_progress_bar_enabled()
