"""HTTP for an OpenAI-compatible server: bounded concurrency, timeouts, retries with backoff, the API key.

- Concurrency: at most `concurrency` requests in flight (a thread pool; each worker thread has its own
  requests.Session, since a Session is not documented as thread-safe).
- Timeouts: (connect, read) = (min(10, timeout_s), timeout_s) seconds per attempt.
- Retries: 429, 5xx, connection errors, timeouts and bodies that are not JSON are retried up to `max_retries`
  times with exponential backoff and full jitter (sleep uniform(0, backoff_s * 2**attempt), capped at
  `max_backoff_s`); a Retry-After header (seconds) on 429/503 is honoured when longer. Other 4xx are not
  retried: they are the request's fault (ApiError at once).
- The API key: read from the environment variable named `api_key_env` (None = no key) when the client is made,
  sent only as an `Authorization: Bearer` header, and kept out of every message, log line and file: the key's
  value never appears in an exception text (ApiError messages carry the URL, status and a short body excerpt,
  with the key scrubbed should a server echo it).

Hand-written rather than via the `openai` client: it needs vLLM's extra fields (prompt_logprobs,
return_tokens_as_token_ids, token-id prompts) and per-request retry accounting, and requests is already
installed.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import urlparse

import requests

from leakaudit.audit_options import flag_for
from leakaudit.errors import ConfigError, LeakauditError

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class ApiError(LeakauditError):
    """A request that failed for good (retries spent, or a non-retryable answer)."""


def check_base_url(url: str) -> str:
    """The base URL without a trailing slash; ConfigError (naming audit.target) unless it is
    http(s)://HOST[:PORT][/path]."""
    parsed = urlparse(url.strip()) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"audit.target {url!r}: an API target must be an http:// or https:// URL with a host, "
                          "e.g. http://127.0.0.1:8000/v1")
    try:
        parsed.port  # noqa: B018 - raises ValueError on a non-numeric or out-of-range port
    except ValueError:
        raise ConfigError(f"audit.target {url!r}: bad port") from None
    if parsed.query or parsed.fragment:
        raise ConfigError(f"audit.target {url!r}: an API base URL has no query or fragment")
    return url.strip().rstrip("/")


def is_api_target(target: str) -> bool:
    """Whether an audit target names an HTTP endpoint rather than a model directory or hub id."""
    return isinstance(target, str) and target.strip().lower().startswith(("http://", "https://"))


DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def key_env_name(setting: str | None) -> str | None:
    """The variable an `api_key_env` setting names: None -> OPENAI_API_KEY when that is set, else None (no key);
    '' -> None; a name -> that name (read_api_key then insists it is set)."""
    if setting is None:
        return DEFAULT_KEY_ENV if os.environ.get(DEFAULT_KEY_ENV, "").strip() else None
    return setting.strip() or None


def read_api_key(env_name: str | None) -> str | None:
    """The key from environment variable `env_name`; None when `env_name` is None. ConfigError (naming the
    variable, never a value) when the variable is named but unset or empty. '' is no variable, like None."""
    if not env_name:
        return None
    value = os.environ.get(env_name, "")
    if not value.strip():
        flag = flag_for("audit.api_key_env")
        raise ConfigError(f"{flag} {env_name}: environment variable {env_name} is not set (or empty); "
                          f"export the key there, or pass {flag} '' for a server without a key")
    return value.strip()


@dataclass
class ClientStats:
    """Counts over the client's life (thread-safe through `lock`)."""

    requests: int = 0
    """HTTP attempts sent (each retry counts)."""
    answered: int = 0
    retries: int = 0
    failures: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def to_dict(self) -> dict[str, Any]:
        with self.lock:
            return {"requests": self.requests, "answered": self.answered, "retries": self.retries,
                    "failures": self.failures, "by_status": dict(self.by_status)}


class ApiClient:
    """POSTs JSON bodies to `base_url + path` with retries; `map` runs many with bounded concurrency."""

    def __init__(self, base_url: str, *, api_key_env: str | None = "OPENAI_API_KEY", concurrency: int = 4,
                 timeout_s: float = 60.0, max_retries: int = 4, backoff_s: float = 0.5, max_backoff_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None):
        if concurrency < 1:
            raise ConfigError(f"api concurrency must be >= 1, got {concurrency}")
        if not timeout_s > 0:
            raise ConfigError(f"api timeout must be > 0 seconds, got {timeout_s}")
        if max_retries < 0:
            raise ConfigError(f"api max_retries must be >= 0, got {max_retries}")
        self.base_url = check_base_url(base_url)
        self._key = read_api_key(api_key_env)
        self.concurrency = int(concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self._local = threading.local()
        self.stats = ClientStats()

    def __repr__(self) -> str:  # never shows the key
        return f"ApiClient({self.base_url!r}, concurrency={self.concurrency}, key={'set' if self._key else 'none'})"

    def _session(self) -> requests.Session:
        s = getattr(self._local, "session", None)
        if s is None:
            s = requests.Session()
            if self._key:
                s.headers["Authorization"] = f"Bearer {self._key}"
            self._local.session = s
        return s

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _count(self, status: str) -> None:
        with self.stats.lock:
            self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        with self._rng_lock:
            delay = self._rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** attempt))
        if retry_after is not None:
            try:
                delay = max(delay, min(self.max_backoff_s, float(retry_after)))
            except ValueError:
                pass  # an HTTP-date Retry-After: keep the jittered delay
        return delay

    def get(self, path: str) -> Any:
        """One GET (e.g. /models), retried like a POST."""
        return self._request("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` as JSON; the decoded JSON answer. ApiError once retries are spent."""
        return self._request("POST", path, body)

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        url = self.base_url + path
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self.stats.lock:
                    self.stats.retries += 1
            with self.stats.lock:
                self.stats.requests += 1
            retry_after = None
            try:
                r = self._session().request(method, url, json=body,
                                            timeout=(min(10.0, self.timeout_s), self.timeout_s))
            except requests.Timeout:
                self._count("timeout")
                last = f"no answer within {self.timeout_s:g} s"
            except requests.ConnectionError as e:
                self._count("connection")
                last = f"connection failed ({type(e).__name__})"
            else:
                self._count(str(r.status_code))
                if r.status_code == 200:
                    try:
                        data = r.json()
                    except (ValueError, json.JSONDecodeError):
                        last = "answer is not JSON (malformed or truncated body)"
                    else:
                        with self.stats.lock:
                            self.stats.answered += 1
                        return data
                elif r.status_code in RETRY_STATUS:
                    retry_after = r.headers.get("Retry-After")
                    last = f"HTTP {r.status_code}: {self._scrub(r.text[:200])}"
                else:
                    with self.stats.lock:
                        self.stats.failures += 1
                    raise ApiError(f"{method} {url}: HTTP {r.status_code}: {self._scrub(r.text[:300])}")
            if attempt < self.max_retries:
                self._sleep(self._backoff(attempt, retry_after))
        with self.stats.lock:
            self.stats.failures += 1
        raise ApiError(f"{method} {url}: gave up after {self.max_retries + 1} attempts; last: {last}")

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """fn(item) for every item with at most `concurrency` running at once; yields results as they finish
        (not in order). The first exception stops new work and is raised after the running calls end."""
        items = list(items)
        if not items:
            return
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)),
                                thread_name_prefix="leakaudit-api") as pool:
            futures = [pool.submit(fn, it) for it in items]
            try:
                for fut in as_completed(futures):
                    yield fut.result()
            finally:
                for fut in futures:
                    fut.cancel()
