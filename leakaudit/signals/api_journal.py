"""An append-only JSONL journal of answered API requests, so a crash loses only the requests in flight.

One line per answered request, written and fsynced as its answer arrives (before the next answer is taken):
    {"hash": sha256 of the request body, "key": caller's key (e.g. record_id), "kind": "sample" | "score",
     "response": the parsed result (a small JSON object: ids and log-probs, or why the record was excluded)}
On open, every complete line is read back; a last line cut short by a kill -9 (no trailing newline or not
JSON) is dropped and the file truncated to the last complete line, so the next append starts a fresh line.
A rerun asks `get(hash)` before sending: only requests without an answer are sent again, and an answer already
present is never appended twice (the first one wins), so nothing is lost or duplicated.

The journal holds request hashes and model outputs only: never a request header, so never the API key.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


class Journal:
    """Thread-safe append-only store of answered requests, keyed by request hash."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = {}
        self.dropped_tail = False
        """True when opening found (and cut) a torn last line."""
        self._load()

    def _load(self) -> None:
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        good = 0  # byte length of the complete, parseable prefix
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                break
            if isinstance(entry, dict) and isinstance(entry.get("hash"), str):
                self._entries.setdefault(entry["hash"], entry)
            good += len(line)
        if good < len(data):
            self.dropped_tail = True
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_hash: str) -> bool:
        return request_hash in self._entries

    def get(self, request_hash: str) -> dict[str, Any] | None:
        return self._entries.get(request_hash)

    def entries(self) -> list[dict[str, Any]]:
        return list(self._entries.values())

    def append(self, request_hash: str, key: str, kind: str, response: dict[str, Any]) -> bool:
        """Store one answer durably (write + flush + fsync). Returns False (and writes nothing) when the hash
        already has an answer."""
        entry = {"hash": request_hash, "key": key, "kind": kind, "response": response}
        line = (json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            if request_hash in self._entries:
                return False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._entries[request_hash] = entry
        return True
