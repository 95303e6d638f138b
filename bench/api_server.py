"""A small OpenAI-compatible completions server over a transformers model, answering in vLLM's schema.

Used by the tests (and bench/bench_api.py) as a real HTTP server on 127.0.0.1. stdlib ThreadingHTTPServer on
purpose: it needs no new dependency and no event loop, and one lock around the model is all the concurrency a
test needs. Not a production server.

    python bench/api_server.py --model DIR --name tiny [--port 0] [fault options]
prints `PORT <n>` on stdout once it listens.

Schema (vllm/entrypoints/openai/protocol.py, CompletionResponse / CompletionResponseChoice /
CompletionLogProbs; token strings as vllm/entrypoints/openai/serving_engine.py renders them):
  {"id", "object": "text_completion", "created", "model",
   "choices": [{"index", "text", "logprobs": {"text_offset", "token_logprobs", "tokens", "top_logprobs"},
                "finish_reason": "stop" | "length", "stop_reason": null,
                "prompt_logprobs": null | [null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]}],
   "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
Tokens are 'token_id:N' when the request sets return_tokens_as_token_ids, else the one-token decode.

Sampling is leakaudit's own: HFBackend.sample with SamplingConfig(seed=request seed, n_per_record=n), so choice
j of a request with seed s is drawn with sampler.row_seed(s, prompt, j), the tokens the local backend gives for
the same seed; log-probs are HFBackend.score's (fp32, the model's raw distribution). A request without a seed
gets a random one.

Fault modes (counted over POST /v1/completions, across threads; the windows follow each other in this order):
  --fail-first N      answer 500 to the first N requests
  --malformed-first N then answer a truncated JSON body to the next N
  --stall-first N --stall-s S   then sleep S seconds before answering each of the next N
  --corrupt-first N   in the first N sampling requests with a prompt longer than 8 tokens (an audit's, not the
                      probe's), replace one token string of choice 0 by a string no token decodes to
  --kill-after N      SIGKILL this process when request N+1 arrives (after answering N)
  --ignore-n          answer one choice whatever n says
  --no-token-ids      ignore return_tokens_as_token_ids (token strings only)
  --no-prompt-logprobs ignore prompt_logprobs and echo (no fixed-text log-probs)
  --echo-only         ignore prompt_logprobs, honour echo
  --shift-echo        echo log-probs one position early (each token shows the next one's; the last repeated),
                      the kind of misalignment of llama-cpp-python#1983
  --api-key-env NAME  require `Authorization: Bearer $NAME`
GET /stats returns the counters (requests, by kind) for tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BAD_TOKEN = "\u0001not-a-token\u0002"


class State:
    def __init__(self, args: argparse.Namespace):
        from leakaudit.models import load_tokenizer
        from leakaudit.signals.hf_backend import HFBackend

        self.args = args
        self.backend = HFBackend(args.model, device="cpu", score_batch_size=16)
        self.tokenizer = load_tokenizer(args.model)
        self.model_lock = threading.Lock()
        self.count_lock = threading.Lock()
        self.counts = {"completions": 0, "sample": 0, "score": 0, "corrupted": 0}
        self.key = os.environ.get(args.api_key_env, "") if args.api_key_env else ""

    def next_request(self) -> int:
        with self.count_lock:
            self.counts["completions"] += 1
            return self.counts["completions"]


def _tok(state: State, token_id: int, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else state.tokenizer.decode([int(token_id)])


def completion(state: State, body: dict[str, Any], corrupt: bool) -> dict[str, Any]:
    from leakaudit.signals.backend import SamplingConfig

    args = state.args
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompt = state.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        raise ValueError("prompt must be a non-empty string or list of token ids")
    n = 1 if args.ignore_n else int(body.get("n", 1))
    max_tokens = int(body.get("max_tokens", 16))
    as_ids = bool(body.get("return_tokens_as_token_ids")) and not args.no_token_ids
    echo = bool(body.get("echo")) and not args.no_prompt_logprobs
    want_prompt_lp = (body.get("prompt_logprobs") is not None and not args.no_prompt_logprobs
                      and not args.echo_only)
    seed = body.get("seed")
    seed = random.randrange(2**62) if seed is None else int(seed)
    with state.model_lock:
        if max_tokens > 0:
            cfg = SamplingConfig(n_per_record=n, temperature=float(body.get("temperature", 1.0)),
                                 top_p=float(body.get("top_p", 1.0)), max_new_tokens=max_tokens, seed=seed)
            comps = state.backend.sample([prompt], cfg)[0]
            lps = [s.logp.tolist() for s in state.backend.score([prompt] * n, comps)] if comps else []
        else:
            comps, lps = [[] for _ in range(n)], [[] for _ in range(n)]
        prompt_lp = (state.backend.score([prompt[:1]], [prompt[1:]])[0].logp.tolist()
                     if (echo or want_prompt_lp) and len(prompt) > 1 else [])
    out_choices = []
    for j, (ids, lp) in enumerate(zip(comps, lps)):
        tokens = [_tok(state, t, as_ids) for t in ids]
        if corrupt and j == 0 and tokens:
            tokens[len(tokens) // 2] = BAD_TOKEN
        values: list[float | None] = list(lp)
        if echo:
            tokens = [_tok(state, t, as_ids) for t in prompt] + tokens
            shown = prompt_lp[1:] + prompt_lp[-1:] if args.shift_echo and prompt_lp else prompt_lp
            values = [None] + shown + values
        offsets, pos = [], 0
        for t in tokens:
            offsets.append(pos)
            pos += len(t)
        finish = "length" if len(ids) >= max_tokens else "stop"
        plp = None
        if want_prompt_lp:
            plp = [None] + [{str(t): {"logprob": v, "rank": 1, "decoded_token": _tok(state, t, False)}}
                            for t, v in zip(prompt[1:], prompt_lp)]
        out_choices.append({
            "index": j, "text": state.tokenizer.decode(ids),
            "logprobs": {"text_offset": offsets, "token_logprobs": values, "tokens": tokens,
                         "top_logprobs": [None if v is None else {t: v} for t, v in zip(tokens, values)]},
            "finish_reason": finish, "stop_reason": None, "prompt_logprobs": plp})
    n_gen = sum(len(c) for c in comps)
    return {"id": f"cmpl-{random.getrandbits(64):016x}", "object": "text_completion", "created": int(time.time()),
            "model": args.name, "choices": out_choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": n_gen, "total_tokens": len(prompt) + n_gen}}


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, payload: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _json(self, code: int, obj: Any) -> None:
            self._send(code, json.dumps(obj).encode("utf-8"))

        def _authorized(self) -> bool:
            if not state.key:
                return True
            if self.headers.get("Authorization", "") == f"Bearer {state.key}":
                return True
            self._json(401, {"error": {"message": "invalid api key", "type": "auth", "code": 401}})
            return False

        def do_GET(self):
            if self.path == "/stats":
                with state.count_lock:
                    return self._json(200, dict(state.counts))
            if not self._authorized():
                return
            if self.path.rstrip("/") == "/v1/models":
                return self._json(200, {"object": "list", "data": [
                    {"id": state.args.name, "object": "model", "owned_by": "leakaudit-test", "max_model_len": 4096}]})
            self._json(404, {"error": {"message": "not found", "type": "not_found", "code": 404}})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            if not self._authorized():
                return
            if self.path.rstrip("/") != "/v1/completions":
                return self._json(404, {"error": {"message": "not found", "type": "not_found", "code": 404}})
            args = state.args
            k = state.next_request()
            if args.kill_after and k > args.kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            # fault windows follow each other: requests 1..F fail, the next M are malformed, the next S stall
            malformed = args.fail_first < k <= args.fail_first + args.malformed_first
            stall_from = args.fail_first + args.malformed_first
            if k <= args.fail_first:
                return self._json(500, {"error": {"message": "injected failure", "type": "server", "code": 500}})
            if stall_from < k <= stall_from + args.stall_first:
                time.sleep(args.stall_s)
            try:
                body = json.loads(raw)
                sampling = int(body.get("max_tokens", 16)) > 1 and body.get("prompt_logprobs") is None
                corrupt = False
                if sampling and isinstance(body.get("prompt"), list) and len(body["prompt"]) > 8:
                    with state.count_lock:
                        state.counts["sample"] += 1
                        if state.counts["corrupted"] < args.corrupt_first:
                            state.counts["corrupted"] += 1
                            corrupt = True
                elif not sampling:
                    with state.count_lock:
                        state.counts["score"] += 1
                out = completion(state, body, corrupt)
            except (ValueError, KeyError, TypeError) as e:
                return self._json(400, {"error": {"message": str(e), "type": "BadRequestError", "code": 400}})
            payload = json.dumps(out).encode("utf-8")
            if malformed:
                payload = payload[: len(payload) // 2]
            self._send(200, payload)

    return Handler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", default="tiny")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    for flag in ("fail-first", "stall-first", "malformed-first", "corrupt-first", "kill-after"):
        ap.add_argument(f"--{flag}", type=int, default=0)
    ap.add_argument("--stall-s", type=float, default=5.0)
    ap.add_argument("--ignore-n", action="store_true")
    ap.add_argument("--no-token-ids", action="store_true")
    ap.add_argument("--no-prompt-logprobs", action="store_true")
    ap.add_argument("--echo-only", action="store_true")
    ap.add_argument("--shift-echo", action="store_true")
    ap.add_argument("--api-key-env", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import torch

    torch.set_num_threads(1)
    args = parse_args(argv)
    state = State(args)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())


# ---- for tests and benches: run the server in a subprocess ------------------------------------------------------
class ServerProcess:
    """`python bench/api_server.py ...` in a subprocess on a free port; `url` is its /v1 base. Pinned to the CPUs
    this process may use (taskset is inherited)."""

    def __init__(self, model_dir: str, *flags: str, name: str = "tiny", env: dict[str, str] | None = None,
                 timeout_s: float = 120.0):
        import subprocess

        cmd = [sys.executable, os.path.abspath(__file__), "--model", str(model_dir), "--name", name, *flags]
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        full_env["PYTHONPATH"] = os.pathsep.join([repo, full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, text=True)
        deadline = time.time() + timeout_s
        line = ""
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("PORT ") or self.proc.poll() is not None:
                break
        if not line.startswith("PORT "):
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.kill()
            raise RuntimeError(f"test server did not start: {err[-2000:]}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, int]:
        import requests

        return requests.get(f"http://127.0.0.1:{self.port}/stats", timeout=10).json()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
