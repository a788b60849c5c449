"""The files the gateway reads while it runs, each re-read when it changes and each refused unless it is what
root wrote: the routes (root's, 0644 at most), the endpoint's keys and every deployment's own key (root's,
readable by the gateway's group at most). None is followed through a link.

The routes file (JSON, written atomically by the serve role) maps each served name to its deployment:
    {"models": {"NAME": {"url": "http://127.0.0.1:8000", "recipe": "R", "slot": null}, ...}, "default": "NAME"}
A keys file holds one key a line (blank lines and `#` comments aside). An engine's own key is the one line of
UPSTREAM_KEYS/SLOT.key (`@primary.key` for the primary deployment: no slot has that name).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import gateway_events

MAX_FILE = 1 << 20
ROOT = 0


def read_guarded(path: Path, most: int, owner: int = ROOT) -> bytes:
    """The file's bytes; OSError/ValueError unless it is a regular file (not a link), owned by `owner`, with no
    mode bit outside `most` and at most MAX_FILE bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("is not a regular file")
        if info.st_uid != owner:
            raise ValueError(f"is owned by uid {info.st_uid}, not root")
        if stat.S_IMODE(info.st_mode) & ~most:
            raise ValueError(f"has mode {stat.S_IMODE(info.st_mode):04o}; {most:04o} at most")
        if info.st_size > MAX_FILE:
            raise ValueError(f"is over {MAX_FILE} bytes")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(MAX_FILE + 1)
    finally:
        os.close(fd)


class Watched:
    """A file read again when its stamp (inode, mtime, size) changes; a bad file keeps the last good content
    (and says so once in the journal)."""

    most = 0o644

    def __init__(self, path: Path, owner: int = ROOT) -> None:
        self.path, self.owner = path, owner
        self.lock = threading.Lock()
        self.stamp: tuple[int, int, int] | None = None
        self.problem = ""
        self.value: Any = self.empty()

    def empty(self) -> Any:
        return None

    def parse(self, data: bytes) -> Any:
        raise NotImplementedError

    def current(self, force: bool = False) -> Any:
        try:
            info = os.lstat(self.path)
            stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None
        with self.lock:
            if force or stamp != self.stamp:
                self.stamp = stamp
                self._load()
            return self.value

    def _load(self) -> None:
        try:
            self.value, problem = self.parse(read_guarded(self.path, self.most, self.owner)), ""
        except FileNotFoundError:
            self.value, problem = self.empty(), ""
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problem = f"{self.path}: {exc}"
        if problem and problem != self.problem:
            gateway_events.say(f"{problem}; keeping what it said before")
        self.problem = problem


def _seconds(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400:
        raise ValueError(f"first_byte_s {value!r} is not seconds from 1 to a day")
    return float(value)


# a systemd service name as sparkplay names its units (the gateway reads its cgroup: nothing else of it)
UNIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,200}\.service\Z")


def _nodes(raw: Any) -> dict[str, dict[str, Any]]:
    """Each node as admission counted it (node_memory.nodes): MemTotal, the reserve, claims by served name."""
    if not isinstance(raw, dict):
        return {}
    out = {}
    for host, node in raw.items():
        if isinstance(node, dict):
            claims = node.get("claims") if isinstance(node.get("claims"), dict) else {}
            out[str(host)] = {
                "total_bytes": int(node.get("total_bytes") or 0),
                "reserve_bytes": int(node.get("reserve_bytes") or 0),
                "claims": {str(name): int(b) for name, b in claims.items()},
            }
    return out


class Routes(Watched):
    def empty(self) -> dict[str, Any]:
        return {"models": {}, "default": None, "budgets": {}, "nodes": {}, "ttl_s": None, "wait_s": None}

    def parse(self, data: bytes) -> dict[str, Any]:
        raw = json.loads(data)
        models: dict[str, dict[str, Any]] = {}
        for name, route in raw["models"].items():
            url = urlsplit(str(route["url"]))
            if url.scheme != "http" or not url.hostname or url.path not in ("", "/") or url.query:
                raise ValueError(f"{name}: {route['url']} is not http://HOST:PORT")
            slot = route.get("slot")
            models[str(name)] = {
                "url": f"http://{url.netloc}",
                "recipe": str(route.get("recipe") or ""),
                "slot": None if slot is None else str(slot),
                "host": str(route.get("host") or ""),
                "on_demand": route.get("on_demand") is True,
                "claim": int(route.get("claim") or 0),
                "units": [str(u) for u in route.get("units") or []],
                "unit": str(route["unit"]) if UNIT.match(str(route.get("unit") or "")) else None,
                # its watchdog's state file, where its leader is the gateway's node (gateway_watch.py)
                "watch": str(route["watch"]) if isinstance(route.get("watch"), str) and route["watch"] else None,
                # how long its first byte may take (serve_first_byte_timeout); None: the gateway's --timeout
                "first_byte_s": _seconds(route.get("first_byte_s")),
            }
        default = raw.get("default")
        budgets = {str(h): int(b) for h, b in (raw.get("budgets") or {}).items()}
        return {
            "nodes": _nodes(raw.get("nodes")),
            "models": models,
            "default": default if isinstance(default, str) else None,
            "budgets": budgets,
            "ttl_s": float(raw.get("ttl_s") or 0) or None,
            "wait_s": float(raw.get("wait_s") or 0) or None,
        }


class Keys(Watched):
    """The keys a client may present. An unreadable or bad file refuses every request (fails closed)."""

    most = 0o640

    def empty(self) -> list[bytes]:
        return []

    def parse(self, data: bytes) -> list[bytes]:
        lines = [line.strip() for line in data.decode().splitlines()]
        keys = [hashlib.sha256(line.encode()).digest() for line in lines if line and not line.startswith("#")]
        if not keys:
            raise ValueError("holds no key")
        return keys

    def _load(self) -> None:
        super()._load()
        if self.problem or self.stamp is None:
            self.value = None  # nothing is let through on a file that is gone or wrong

    def admits(self, header: str | None) -> bool:
        keys = self.current()
        if not keys or not header or not header.startswith("Bearer "):
            return False
        given = hashlib.sha256(header[len("Bearer ") :].strip().encode()).digest()
        # every key compared, in constant time each: neither which key nor how much of one matched shows
        return sum(hmac.compare_digest(given, key) for key in keys) > 0


class UpstreamKeys:
    """Each deployment's own key, for the gateway to present to it (clients never see it)."""

    def __init__(self, folder: Path | None, owner: int = ROOT) -> None:
        self.folder, self.owner = folder, owner
        self.files: dict[str, Watched] = {}

    def of(self, slot: str | None) -> str | None:
        if self.folder is None:
            return None
        name = "@primary" if slot is None else slot  # names.PRIMARY_KEY: no slot can be named so
        if name not in self.files:
            self.files[name] = _OneKey(self.folder / f"{name}.key", self.owner)
        return self.files[name].current()


class _OneKey(Watched):
    most = 0o640

    def parse(self, data: bytes) -> str | None:
        key = data.decode().strip()
        if not key or "\n" in key or "\r" in key:
            raise ValueError("is not one key on one line")
        return key
