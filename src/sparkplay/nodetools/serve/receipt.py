"""A start's receipt: how long the leader's unit took from its start to an open port, a healthy API, its model
listed, the first streamed token of a real request and the proof's whole answer.

Ready means the first streamed token (a model that compiles its kernels at its first request is not ready
before that); the readiness wait's timeout (serve_health_timeout) bounds it. The times count from the unit's
own start (systemd's ExecMainStartTimestampMonotonic, the clock time.monotonic reads); a wait that did not
follow a start (nothing was started, or the model stopped answering) writes no receipt, so the last start's
stays. Written on the leader as JSON (0644: no secret in it), read back by `probe` for status.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import time
import urllib.parse
from pathlib import Path
from typing import Any

from .common import API_KEY, unit_show

# a start older than the wait by more than this is not this wait's start (the unit ran before it)
FRESH_S = 600.0
MAX_BYTES = 64 << 10


def unit_started(unit: str, now: float) -> float | None:
    """When the unit's main process started, on time.monotonic's clock; None when it did not start lately."""
    raw = unit_show(unit, "ExecMainStartTimestampMonotonic").get("ExecMainStartTimestampMonotonic", "")
    try:
        started = int(raw) / 1e6
    except ValueError:
        return None
    return started if 0 < started <= now and now - started <= FRESH_S else None


def port_open(url: str, timeout: float = 1.0) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout).close()
    except OSError:
        return False
    return True


def first_token(url: str, model: str, prompt: str, max_tokens: int, timeout: float) -> float | None:
    """Seconds until the first streamed token of a chat completion (content or reasoning), None when the API
    streams none (an embedding model, an error)."""
    parts = urllib.parse.urlsplit(url)
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
            "stream": True,
        }
    )
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if API_KEY:
        headers["Authorization"] = f"Bearer {API_KEY[0]}"
    started = time.monotonic()
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
    try:
        conn.request("POST", f"{parts.path.rstrip('/')}/v1/chat/completions", body=body, headers=headers)
        reply = conn.getresponse()
        if reply.status != 200:
            return None
        while time.monotonic() - started < timeout:
            line = reply.readline(MAX_BYTES)
            if not line:
                return None
            if _has_token(line):
                return time.monotonic() - started
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    return None


def _has_token(line: bytes) -> bool:
    if not line.startswith(b"data:"):
        return False
    try:
        event = json.loads(line[5:])
        delta = event["choices"][0].get("delta") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))


class Receipt:
    """The times a wait saw, each the first moment it saw it, counted from `origin`."""

    def __init__(self, origin: float, since: str) -> None:
        self.origin, self.since = origin, since
        self.seen: dict[str, float | None] = {}

    def mark(self, what: str, when: float | None) -> None:
        """`what` was first seen at `when` (time.monotonic), or cannot be (None: an API that streams no token)."""
        self.seen.setdefault(what, when)

    def doc(self) -> dict[str, Any]:
        times = {k: (round(v - self.origin, 3) if v is not None else None) for k, v in self.seen.items()}
        return {
            "since": self.since,
            **{k: times.get(k) for k in ("port_open_s", "http_ready_s", "listed_s", "first_token_s", "answer_s")},
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def write(path: str, doc: dict[str, Any]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    staged = target.with_name(f".{target.name}.new")
    staged.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
    staged.chmod(0o644)
    staged.replace(target)


def read(path: str) -> dict[str, Any] | None:
    """The receipt kept at `path` (a regular file, JSON object, at most 64 KiB), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        try:
            doc = json.loads(fh.read(MAX_BYTES))
        except ValueError:
            return None
    return doc if isinstance(doc, dict) else None
