"""The API target without a server: the vLLM-schema parser on recorded responses (tests/fixtures/vllm, README there says
where their shape comes from), token-string recovery with its re-encode check, the journal's torn-line recovery,
URL / API key validation, and the backoff schedule."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from leakaudit.errors import ConfigError
from leakaudit.signals.api_client import ApiClient, check_base_url, key_env_name, read_api_key
from leakaudit.signals.api_journal import Journal
from leakaudit.signals.api_protocol import (ResponseError, TokenMapper, UnrecoverableTokens, choices,
                                            parse_completion, parse_echo_logprobs, parse_prompt_logprobs,
                                            request_hash, sample_body, score_body)

FIX = Path(__file__).parent / "fixtures" / "vllm"
PROMPT = [45319, 216, 34, 1232, 216, 35, 30]  # "Compute 2 + 3." (SmolLM2)
ANSWER = [378, 2988, 314, 216, 37, 30]  # " The answer is 5."
ANSWER_LP = [-2.25, -0.5, -0.125, -1.75, -0.0625, -0.3125]


def _load(name: str) -> dict:
    return json.loads((FIX / name).read_text(encoding="utf-8"))


def test_token_id_choices_parse_in_index_order():
    got = [parse_completion(c, None) for c in choices(_load("completion_token_ids.json"))]
    assert got[0].ids == ANSWER and got[0].logprobs == ANSWER_LP and got[0].finish_reason == "length"
    assert got[1].ids == [216, 37] and got[1].logprobs == [-1.0, -3.5]


def test_token_strings_are_mapped_with_the_tokenizer_and_checked(tokenizer):
    mapper = TokenMapper(tokenizer)
    got = parse_completion(choices(_load("completion_token_strings.json"))[0], mapper)
    assert got.ids == ANSWER and got.logprobs == ANSWER_LP
    with pytest.raises(UnrecoverableTokens, match="U\\+FFFD|tokens of the base tokenizer"):
        parse_completion(choices(_load("completion_bad_strings.json"))[0], mapper)
    with pytest.raises(UnrecoverableTokens):  # strings and no tokenizer: never guessed
        parse_completion(choices(_load("completion_token_strings.json"))[0], None)


def test_prompt_logprobs_and_echo_give_the_same_values():
    expected = [-3.5, -2.0, -1.25, -0.75, -2.5, -0.5]  # log p(prompt[t] | prompt[:t]), t = 1..6
    assert parse_prompt_logprobs(choices(_load("prompt_logprobs.json"))[0], PROMPT) == expected
    assert parse_echo_logprobs(choices(_load("echo.json"))[0], PROMPT) == expected
    with pytest.raises(ResponseError, match="no entry for the prompt's token"):
        parse_prompt_logprobs(choices(_load("prompt_logprobs.json"))[0], PROMPT[:-1] + [31])
    with pytest.raises(ResponseError, match="entries for a prompt"):
        parse_prompt_logprobs(choices(_load("prompt_logprobs.json"))[0], PROMPT[:-1])
    with pytest.raises(ResponseError, match="not the prompt's token ids"):  # an echo of other tokens
        parse_echo_logprobs(choices(_load("echo.json"))[0], [PROMPT[0], *PROMPT[2:], 30])


@pytest.mark.parametrize("body", [_load("error_400.json"), {"choices": []}, {"choices": [{"index": 0}]}, [1, 2]])
def test_malformed_shapes_are_response_errors(body):
    with pytest.raises(ResponseError):
        parse_completion(choices(body)[0], None)


def test_positive_or_nan_logprobs_are_refused():
    bad = _load("completion_token_ids.json")
    bad["choices"][0]["logprobs"]["token_logprobs"][2] = 0.5
    with pytest.raises(ResponseError, match="not a finite number <= 0"):
        parse_completion(choices(bad)[0], None)


def test_request_bodies_pin_sampling_and_hash_stably():
    body = sample_body("m", PROMPT, n=4, seed=7, max_tokens=16)
    assert body["temperature"] == 1.0 and body["top_p"] == 1.0 and body["top_k"] == -1
    assert body["repetition_penalty"] == 1.0 and body["min_p"] == 0.0 and body["logprobs"] == 1
    assert body["prompt"] == PROMPT and body["return_tokens_as_token_ids"] is True and body["seed"] == 7
    assert request_hash(body) == request_hash(dict(reversed(list(body.items()))))  # key order does not matter
    assert request_hash(body) != request_hash({**body, "seed": 8})
    assert score_body("m", PROMPT, mode="prompt_logprobs")["prompt_logprobs"] == 0
    assert score_body("m", PROMPT, mode="echo")["echo"] is True


def test_journal_survives_a_torn_last_line_and_never_duplicates(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    assert j.append("h1", "r1", "sample", {"x": 1}) and j.append("h2", "r2", "sample", {"x": 2})
    assert not j.append("h1", "r1", "sample", {"x": 99})  # an answer already stored is kept, not appended
    with open(tmp_path / "j.jsonl", "ab") as f:  # a kill -9 in the middle of a write
        f.write(b'{"hash": "h3", "key": "r3", "kind": "sa')
    again = Journal(tmp_path / "j.jsonl")
    assert again.dropped_tail and len(again) == 2 and again.get("h1")["response"] == {"x": 1}
    again.append("h3", "r3", "sample", {"x": 3})
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert [json.loads(s)["hash"] for s in lines] == ["h1", "h2", "h3"]


@pytest.mark.parametrize("url", ["ftp://host/v1", "http://", "localhost:8000/v1", "http://h:99999/v1",
                                 "http://h:80/v1?x=1"])
def test_bad_urls_are_config_errors(url):
    """The config's error names the key (right for a YAML file); the audit's CLI shows the flag instead."""
    from leakaudit.audit_options import flag_named

    with pytest.raises(ConfigError, match="audit.target") as e:
        check_base_url(url)
    assert flag_named(str(e.value), "runs/audit").startswith("--target ")


def test_api_key_env_resolution(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("LEAK_KEY_UNSET", raising=False)
    assert key_env_name(None) is None and key_env_name("") is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abc")
    assert key_env_name(None) == "OPENAI_API_KEY"
    with pytest.raises(ConfigError, match="LEAK_KEY_UNSET is not set") as e:
        read_api_key("LEAK_KEY_UNSET")
    assert "sk-abc" not in str(e.value)
    client = ApiClient("http://127.0.0.1:1/v1", api_key_env="OPENAI_API_KEY")
    assert "sk-abc" not in repr(client)


def test_backoff_is_exponential_with_full_jitter_and_honours_retry_after():
    c = ApiClient("http://127.0.0.1:1/v1", api_key_env=None, backoff_s=0.5, max_backoff_s=8.0,
                  rng=random.Random(0))
    for attempt in range(6):
        assert 0.0 <= c._backoff(attempt, None) <= min(8.0, 0.5 * 2 ** attempt)
    assert c._backoff(0, "3") >= 3.0 and c._backoff(0, "100") == 8.0  # Retry-After, capped


def test_api_pacing_is_not_part_of_the_config_hash_but_the_endpoint_is():
    from leakaudit.config import load_config

    audit = ["audit.target=http://127.0.0.1:8000/v1", "audit.candidates=c.jsonl", "audit.target_model=m"]
    base = load_config(preset="tiny", overrides=audit).hash()
    for extra in ("audit.api_concurrency=16", "audit.api_timeout_s=5", "audit.api_max_retries=0",
                  "audit.api_key_env=MY_KEY"):
        assert load_config(preset="tiny", overrides=[*audit, extra]).hash() == base, extra
    assert load_config(preset="tiny", overrides=[*audit, "audit.target_model=other"]).hash() != base
