"""A student reachable only over an OpenAI-compatible log-prob API, against a real HTTP server on
127.0.0.1 (bench/api_server.py: the tiny model behind vLLM's response schema, leakaudit's seeded sampler).

Tolerance: per-token log-probs over HTTP equal the local backend's within 1e-5 nats (fp32; both sides run
HFBackend.score, but in batches of other shapes, and JSON carries the float32 values exactly enough). The tiny
random model is near-uniform over 49152 tokens, so float noise from a different batch composition flips sampled
tokens between neighbouring ids (sampler.py's docstring); the local side samples with batch_size = n_per_record,
so that both sides decode one prompt's n rows together, and then the tokens are identical."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from api_server import ServerProcess
from leakaudit.cli import main
from leakaudit.errors import InputError
from leakaudit.signals.api_backend import ApiBackend, ApiOptions
from leakaudit.signals.api_client import ApiError
from leakaudit.signals.backend import SamplingConfig

TOL = 1e-5
KEY_ENV, KEY = "LEAKAUDIT_TEST_API_KEY", "sk-test-9f8e7d6c5b4a-never-written"
N = 2
CFG = SamplingConfig(n_per_record=N, max_new_tokens=5, seed=11, batch_size=N)
FAST = ["--set", f"signals.sampling.n_per_record={N}", "--set", "signals.sampling.max_new_tokens=4",
        "--set", f"signals.sampling.batch_size={N}", "--set", "metrics.n_boot=20"]


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    with ServerProcess(tiny_model_dir, "--api-key-env", KEY_ENV, env={KEY_ENV: KEY}) as srv:
        yield srv


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    from leakaudit.signals.backend import make_backend

    return make_backend("transformers", tiny_model_dir)


@pytest.fixture(scope="module")
def prompts(tokenizer, sample_records_module):
    from leakaudit.prompting import student_prompt_ids

    return [student_prompt_ids(tokenizer, r) for r in sample_records_module]


@pytest.fixture(scope="module")
def sample_records_module():
    from leakaudit.data.records import Record

    return [Record("math", f"Compute {a} + {b}.", f"{a} + {b} = {a + b}.", source="test")
            for a, b in [(2, 3), (7, 5), (11, 4), (6, 9)]]


def _backend(url, tokenizer, state, **kw):
    opts = dict(model="tiny", api_key_env=KEY_ENV, concurrency=4, timeout_s=30.0, max_retries=4, backoff_s=0.01)
    opts.update(kw)
    return ApiBackend(url, tokenizer, ApiOptions(**opts), state)


def test_api_sampling_and_logprobs_match_the_local_backend(server, local, tokenizer, prompts, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    b = _backend(server.url, tokenizer, tmp_path)
    caps = b.capabilities
    assert caps["n"] and caps["seed"] and caps["token_ids"] and caps["fixed_text_mode"] == "prompt_logprobs"
    got = b.sample(prompts, CFG)
    assert got == local.sample(prompts, CFG) and not b.excluded  # the same seed gives the same tokens
    pre = [p for p in prompts for _ in range(N)]
    conts = [c for per in got for c in per]
    api_lp, loc_lp = b.score(pre, conts), local.score(pre, conts)
    assert b.sent["score"] == 0  # the target's scores of its own samples came back with the samples
    assert max(float(np.max(np.abs(a.logp - l.logp))) for a, l in zip(api_lp, loc_lp)) <= TOL
    text = [list(tokenizer(" The answer is 5.", add_special_tokens=False)["input_ids"])] * len(prompts)
    fixed_api, fixed_loc = b.score(prompts, text, vocab_stats=True), local.score(prompts, text, vocab_stats=True)
    assert all(s.mu is None and s.sigma is None for s in fixed_api)  # no vocabulary statistics over an API
    assert max(float(np.max(np.abs(a.logp - l.logp))) for a, l in zip(fixed_api, fixed_loc)) <= TOL
    echo = b._fixed_logprobs(prompts[0] + text[0], "echo", journal=False)  # the echo path gives the same values
    assert np.max(np.abs(np.asarray(echo[-len(text[0]):]) - fixed_loc[0].logp)) <= TOL


def test_faults_are_retried_and_a_server_killed_mid_run_resumes_without_loss_or_duplicates(
        server, local, tiny_model_dir, tokenizer, prompts, tmp_path, monkeypatch):
    """500 twice, a truncated JSON body, a stall past the 1 s timeout (all on the probe's first request), then
    SIGKILL after the probe and two sampling requests; the rerun against a fresh server sends only the rest.
    The server also ignores prompt_logprobs and shifts its echo log-probs by a position (llama-cpp-python#1983):
    the probe's alignment check refuses them, so no fixed-text attack would run on it."""
    monkeypatch.setenv(KEY_ENV, KEY)
    probe_posts = 4  # two sampling requests, one prompt_logprobs request (ignored), one echo request (shifted)
    flags = ["--echo-only", "--shift-echo",
             "--fail-first", "2", "--malformed-first", "1", "--stall-first", "1", "--stall-s", "3",
             "--kill-after", str(4 + probe_posts + 2), "--api-key-env", KEY_ENV]
    with ServerProcess(tiny_model_dir, *flags, env={KEY_ENV: KEY}) as faulty:
        b = _backend(faulty.url, tokenizer, tmp_path, concurrency=1, timeout_s=1.0, max_retries=4)
        stats = b.client.stats.to_dict()
        # 200s: GET /models, the truncated body (a 200 that is not JSON, retried), the probe's requests
        assert stats["by_status"] == {"200": 2 + probe_posts, "500": 2, "timeout": 1}
        assert stats["retries"] == 4 and stats["failures"] == 0  # malformed JSON is a 200 that was retried
        caps = b.capabilities
        assert caps["n"] and caps["token_ids"] and caps["fixed_text_mode"] is None
        assert any(n.startswith("echo: log-probs of the sampled tokens differ") for n in caps["notes"]), caps
        with pytest.raises(ApiError, match="gave up"):
            b.sample(prompts, CFG)
        assert not faulty.alive()
    lines = (tmp_path / "api_journal.jsonl").read_text().splitlines()
    assert len(lines) == 2  # the two answered requests, stored as they arrived
    before = server.stats()["sample"]
    again = _backend(server.url, tokenizer, tmp_path)
    got = again.sample(prompts, CFG)
    assert server.stats()["sample"] - before == len(prompts) - 2 == again.sent["sample"]
    assert got == local.sample(prompts, CFG)
    hashes = [json.loads(s)["hash"] for s in (tmp_path / "api_journal.jsonl").read_text().splitlines()]
    assert len(hashes) == len(prompts) == len(set(hashes))
    assert KEY not in (tmp_path / "api_journal.jsonl").read_text() + (tmp_path / "capabilities.json").read_text()


def test_server_without_ids_n_or_prompt_logprobs(tiny_model_dir, local, tokenizer, prompts, tmp_path):
    """Token strings mapped back with the base tokenizer (checked), n ignored (one request per trajectory), a
    response whose strings do not re-encode excluded and counted, and no fixed-text scoring."""
    flags = ["--ignore-n", "--no-token-ids", "--no-prompt-logprobs", "--corrupt-first", "1"]
    with ServerProcess(tiny_model_dir, *flags) as srv:
        b = _backend(srv.url, tokenizer, tmp_path, api_key_env=None, concurrency=1)
        caps = b.capabilities
        assert not caps["n"] and not caps["token_ids"] and caps["fixed_text_mode"] is None and caps["seed"]
        assert any(n.startswith("no usable prompt log-probs") for n in caps["notes"]), caps
        got = b.sample(prompts, CFG, keys=[f"r{i}" for i in range(len(prompts))])
        assert srv.stats()["sample"] == len(prompts) * N == b.sent["sample"]
    assert "not-a-token" in b.excluded["r0"]  # the first request (r0, trajectory 0) was the corrupted one
    assert got[0] == []
    kept = [i for i in range(len(prompts)) if f"r{i}" not in b.excluded]
    assert kept and all(len(got[i]) == N for i in kept)
    pre = [prompts[i] for i in kept for _ in range(N)]
    conts = [c for i in kept for c in got[i]]
    # ids recovered from strings are the server's: the local model gives them the log-probs the server sent
    api_lp, loc_lp = b.score(pre, conts), local.score(pre, conts)
    assert max(float(np.max(np.abs(a.logp - l.logp))) for a, l in zip(api_lp, loc_lp)) <= TOL
    with pytest.raises(InputError, match="no prompt log-probs"):
        b.score([prompts[0]], [[378, 2988]])


# ---- the audit command ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def audit_files(tmp_path_factory):
    from leakaudit.data.records import Record

    tmp = tmp_path_factory.mktemp("api_audit")
    # short synthetic records: the audit's cost is scoring texts over a 49152-token vocabulary, not the model
    recs = [Record("math", f"What is {a} times {b}?", f"{a} times {b} is {a * b}.", answer=str(a * b), source="test")
            for a, b in [(2, 3), (4, 7), (6, 5), (9, 8), (3, 12), (7, 7), (5, 11), (8, 6), (12, 4), (13, 2)]]
    rows = [{**r.to_dict(), "meta": {"is_member": i % 2 == 0}} for i, r in enumerate(recs[:6])]
    (tmp / "cands.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp / "pop.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs[6:]), encoding="utf-8")
    return tmp


def _audit(target, out, files, base, ref, *extra):
    return main([str(a) for a in ["audit", "--target", target, "--candidates", files / "cands.jsonl",
                                  "--population", files / "pop.jsonl", "--base-model", base, "--references", ref,
                                  "--out", out, *FAST, *extra]])


@pytest.mark.heavy
def test_api_audit_gives_the_local_audits_scores_and_says_what_it_skipped(
        server, audit_files, tiny_model_dir, tiny_model_dir_b, monkeypatch, capsys):
    monkeypatch.setenv(KEY_ENV, KEY)
    api_out, local_out = audit_files / "api", audit_files / "local"
    assert _audit(server.url, api_out, audit_files, tiny_model_dir, tiny_model_dir_b, "--target-model", "tiny",
                  "--api-key-env", KEY_ENV) == 0
    assert _audit(tiny_model_dir, local_out, audit_files, tiny_model_dir, tiny_model_dir_b) == 0
    api, loc = pd.read_csv(api_out / "candidates.csv"), pd.read_csv(local_out / "candidates.csv")
    assert "min_k_plus_plus" in loc.columns and "min_k_plus_plus" not in api.columns
    cols = [c for c in api.columns if c not in ("record_id", "is_member")]
    assert {"leaky", "fresh_loss", "loss", "rmia_offline"} <= set(cols)
    assert list(api.record_id) == list(loc.record_id)
    for c in cols:  # same seed, same tokens, same log-probs -> the same attack scores
        np.testing.assert_allclose(api[c], loc[c], atol=TOL, rtol=0, err_msg=c)
    info = json.loads((api_out / "audit.json").read_text())["api"]
    assert info["n_excluded"] == 0 and info["capabilities"]["fixed_text_mode"] == "prompt_logprobs"
    assert "min_k_plus_plus" in info["attacks"]["skipped"] and "leaky" in info["attacks"]["run"]
    assert "vocabulary" in info["attacks"]["skipped"]["min_k_plus_plus"]
    html = (api_out / "report.html").read_text(encoding="utf-8")
    assert "Attacks run / skipped and why" in html and "min_k_plus_plus" in html
    # the key is in no file of the run, nor in anything printed
    out = capsys.readouterr()
    assert KEY not in out.out + out.err
    for p in api_out.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p
    # a rerun resumes (with other pacing, which is not part of the config hash): nothing is sent again
    before = server.stats()["completions"]
    assert _audit(server.url, api_out, audit_files, tiny_model_dir, tiny_model_dir_b, "--target-model", "tiny",
                  "--api-key-env", KEY_ENV, "--api-concurrency", "2", "--api-timeout", "30") == 0
    assert server.stats()["completions"] == before


@pytest.mark.parametrize("argv,needle", [
    (["--target", "http://:80/v1", "--target-model", "m"], "--target"),
    (["--target", "http://127.0.0.1:9/v1"], "--target-model"),
    (["--target", "http://127.0.0.1:9/v1", "--target-model", "m", "--api-key-env", "LEAKAUDIT_UNSET_KEY_VAR"],
     "LEAKAUDIT_UNSET_KEY_VAR is not set"),
    (["--target", "http://127.0.0.1:9/v1", "--target-model", "m", "--set", "signals.sampling.temperature=0.7"],
     "temperature 1"),
])
def test_bad_api_flags_exit_2_and_write_nothing(argv, needle, audit_files, tiny_model_dir, tmp_path, capsys,
                                                 monkeypatch):
    monkeypatch.delenv("LEAKAUDIT_UNSET_KEY_VAR", raising=False)
    out = tmp_path / "run"
    code = main([str(a) for a in ["audit", *argv, "--candidates", audit_files / "cands.jsonl", "--population",
                                  audit_files / "pop.jsonl", "--base-model", tiny_model_dir, "--out", out]])
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
    assert not out.exists()


@pytest.mark.heavy
def test_api_audit_of_a_string_only_server_that_dies_mid_audit(audit_files, tiny_model_dir, tiny_model_dir_b,
                                                                capsys):
    """A server that returns token strings only and no prompt log-probs, answers one response whose strings do
    not re-encode, and is SIGKILLed after the probe and two sampling requests: the audit exits 1 (a failed job,
    not bad input) naming the job and the failure; the server comes back on the same URL and the rerun sends only the requests that had no answer
    (nothing lost, nothing sent or stored twice). The record behind the bad response is excluded from every
    attack and listed; the fixed-text attacks are skipped, each with its reason; Leaky runs on the rest."""
    from leakaudit.signals.api_stage import FIXED_REASON, VOCAB_REASON

    out = audit_files / "api_strings"
    flags = ["--no-token-ids", "--no-prompt-logprobs"]
    probe_posts = 4  # two sampling requests, one prompt_logprobs and one echo request (both ignored)
    preflight = 1  # the audit's check before training: one short sampled request (api_stage.probe_api_target)
    argv = ["--target-model", "tiny", "--api-key-env", "", "--api-concurrency", "1", "--api-retries", "1"]
    with ServerProcess(tiny_model_dir, *flags, "--corrupt-first", "1",
                       "--kill-after", str(preflight + probe_posts + 2)) as a:
        port = a.port
        assert _audit(a.url, out, audit_files, tiny_model_dir, tiny_model_dir_b, *argv) == 1 and not a.alive()
    err = capsys.readouterr().err
    assert "sample:target" in err and "gave up" in err, err
    journal = out / "signals" / "fresh" / "target" / "api_journal.jsonl"
    assert len(journal.read_text().splitlines()) == 2
    with ServerProcess(tiny_model_dir, *flags, "--port", str(port)) as b:
        assert _audit(b.url, out, audit_files, tiny_model_dir, tiny_model_dir_b, *argv) == 0
        # 6 candidates + a null sample of 2 (half the 4-record population), 2 answered before the kill
        assert b.stats()["sample"] == 8 - 2
    hashes = [json.loads(line)["hash"] for line in journal.read_text().splitlines()]
    assert len(hashes) == len(set(hashes)) == 8  # one sampling request per candidate or null record, no fixed texts
    info = json.loads((out / "audit.json").read_text())["api"]
    caps = info["capabilities"]
    assert not caps["token_ids"] and caps["fixed_text_mode"] is None
    excluded = info["excluded"]
    first = json.loads((audit_files / "cands.jsonl").read_text().splitlines()[0])["record_id"]
    assert "not-a-token" in excluded[first]  # the first sampling request was the corrupted one
    assert 1 <= info["n_excluded"] == len(excluded) < info["n_requested"] == 8
    skipped = info["attacks"]["skipped"]
    assert skipped["loss"] == FIXED_REASON and skipped["rmia_offline"] == FIXED_REASON
    assert skipped["min_k_plus_plus"] == VOCAB_REASON
    assert {"leaky", "fresh_loss", "fresh_gap_max"} <= set(info["attacks"]["run"])
    assert not (out / "signals" / "fixed" / "target.npz").exists()
    scores = pd.read_parquet(out / "scores.parquet")
    assert not set(excluded) & set(scores.loc[scores.target == "target", "record_id"])
    table = pd.read_csv(out / "candidates.csv").set_index("record_id")
    assert len(table) == 6
    assert table.loc[list(excluded), "leaky"].isna().all() and table.drop(index=list(excluded)).leaky.notna().all()
    html = (out / "report.html").read_text(encoding="utf-8")
    assert all(rid in html for rid in excluded) and "prompt log-probs" in html
