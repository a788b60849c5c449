"""The soak's requests from this machine to an OpenAI API (the gateway, or one deployment's) over HTTP, each one
recorded as the lab's are (sparkplay.lab.soak_load.Request): status, latency, first byte, bytes, whole or not.

Only a loopback address is asked (a tunnel to the leader's gateway, `ssh -L`), so the load never crosses a
network the user did not choose; the key, when the API has one, comes from a file, never an argument.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparkplay.errors import BadInput
from sparkplay.lab.soak_load import Request, body, whole

Sender = Callable[[str, str, bool, float], Request]


def loopback_url(url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http URL on this machine's loopback, or BadInput naming it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "http" or not loopback or parts.query or parts.fragment:
        raise BadInput(
            f"--url {url} is not an http URL on this machine's loopback",
            "tunnel to the leader's gateway (ssh -L 9930:127.0.0.1:9930 LEADER) and give http://127.0.0.1:9930/v1",
        )
    return host, parts.port or 80, parts.path.rstrip("/") or "/v1"


def read_key(path: Path | None) -> str | None:
    """The API key in `path` (its first line), or None without a file."""
    if path is None:
        return None
    try:
        key = next(iter(path.read_text(encoding="utf-8").splitlines()), "").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"--key-file {path} cannot be read as a key: {exc}", "give a file holding the key") from exc
    if not key:
        raise BadInput(f"--key-file {path} is empty", "give a file holding the key on its first line")
    return key


class Client:
    """Requests to one loopback API; thread-safe (a connection per request)."""

    def __init__(self, url: str, key: str | None = None) -> None:
        self.host, self.port, self.prefix = loopback_url(url)
        self.headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})

    def get(self, path: str, timeout: float = 10) -> tuple[int, Any]:
        """GET a path (under the prefix unless it starts with //); (status, JSON or None)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            where = path[1:] if path.startswith("//") else f"{self.prefix}{path}"
            conn.request("GET", where, headers=self.headers)
            reply = conn.getresponse()
            text = reply.read()
            try:
                return reply.status, json.loads(text)
            except ValueError:
                return reply.status, None
        except (OSError, http.client.HTTPException):
            return 0, None
        finally:
            conn.close()

    def models(self) -> tuple[list[str], list[str]]:
        """(always-on, on demand) models the API lists: the gateway's /health says which are on demand."""
        _, listed = self.get("/models")
        names = [str(m.get("id")) for m in (listed or {}).get("data", []) if isinstance(m, dict)]
        _, health = self.get("//health")
        seen = (health or {}).get("models") if isinstance(health, dict) else None
        on_demand = [n for n in names if isinstance(seen, dict) and (seen.get(n) or {}).get("on_demand")]
        return [n for n in names if n not in on_demand], on_demand

    def send(self, model: str, api: str, stream: bool, timeout: float) -> Request:
        """One request, recorded whatever happens (status 0: no answer at all)."""
        path = f"{self.prefix}/{'chat/completions' if api == 'chat' else 'completions'}"
        started, clock = time.time(), time.monotonic()
        first, chunks, status, error = 0.0, [], 0, ""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("POST", path, body=json.dumps(body(model, api, stream)), headers=self.headers)
            reply = conn.getresponse()
            status = reply.status
            while chunk := reply.read1(65536):
                first = first or time.monotonic() - clock
                chunks.append(chunk)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        text = b"".join(chunks).decode(errors="replace")
        ok = status == 200 and whole(text, stream)
        if not ok and not error:
            error = text.strip().splitlines()[-1][:200] if text.strip() else f"HTTP {status}"
        total = time.monotonic() - clock
        return Request(
            started, model, api, stream, status, round(total, 6), round(first, 6), len(text), ok, error[:200]
        )
