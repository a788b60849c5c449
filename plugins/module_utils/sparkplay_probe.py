"""What a role needs to know of a node, read in one module call (on the node: stdlib only)."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable

from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_managed import sha256_file


def dpkg_stanzas(status_file: str) -> list:
    """dpkg's status file as one {field: value} a package (continuation lines left out); none when unreadable."""
    try:
        with open(status_file, encoding="utf-8", errors="replace") as fh:
            stanzas = fh.read().split("\n\n")
    except OSError:
        return []
    return [
        dict(line.split(":", 1) for line in stanza.splitlines() if ":" in line and not line.startswith(" "))
        for stanza in stanzas
    ]


def installed(status_file: str) -> set:
    """Names of the packages dpkg's status file lists as `install ok installed` (any architecture)."""
    ours = [f for f in dpkg_stanzas(status_file) if f.get("Status", "").split() == ["install", "ok", "installed"]]
    return {f["Package"].strip() for f in ours if f.get("Package")}


def read(path: str, limit: int = 1 << 20) -> str | None:
    """A small text file's content, or None when it is absent."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        return None
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data.decode("utf-8", errors="replace")


def read_json(path: str, limit: int = 1 << 20) -> object:
    """A small JSON file's document, or None when it is absent or not JSON (a record half written by a
    crash reads as no record, never as a failed play)."""
    text = read(path, limit)
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def user(name: str) -> dict | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir, "shell": entry.pw_shell}


def free(path: str) -> dict:
    """Free bytes (to a user, as df's avail) on the filesystem of `path`'s nearest existing folder."""
    at = path
    while not os.path.exists(at) and at not in ("/", ""):
        at = os.path.dirname(at.rstrip("/")) or "/"
    st = os.statvfs(at)
    return {"at": at, "bytes": st.f_bavail * st.f_frsize}


def unit_states(systemctl: str | None, run: Callable[[list], tuple[int, str, str]], units: list) -> dict:
    """{unit: {active, enabled}} from one `systemctl show` for all of them; {} without systemctl."""
    if not units or not systemctl:
        return {}
    rc, out, _err = run([systemctl, "show", "--property=Id,ActiveState,UnitFileState", "--", *units])
    if rc != 0:
        return {}
    states = {}
    for name, block in zip(units, out.strip().split("\n\n"), strict=False):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        states[name] = {"active": fields.get("ActiveState", ""), "enabled": fields.get("UnitFileState", "")}
    return states


def missing(paths: list) -> list:
    return [p for p in paths if not os.path.exists(p)]


def executable(paths: list) -> list:
    return [p for p in paths if os.access(p, os.X_OK)]


def modes(paths: list) -> dict:
    """The mode of each path that exists, as an octal string ("0600")."""
    return {p: f"{os.stat(p).st_mode & 0o7777:04o}" for p in paths if os.path.exists(p)}


def digests(paths: list) -> dict:
    """The sha256 of each regular file, None for one that is absent."""
    return {p: sha256_file(p) if os.path.isfile(p) else None for p in paths}


def sizes(paths: list) -> dict:
    """The bytes of each path: a file's size, a folder's regular files' (links not followed), None if absent."""
    found: dict = {}
    for path in paths:
        if not os.path.exists(path):
            found[path] = None
        elif not os.path.isdir(path):
            found[path] = os.stat(path).st_size
        else:
            total, stack = 0, [path]
            while stack:
                with os.scandir(stack.pop()) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
            found[path] = total
    return found


def read_dir(folders: list, suffix: str = ".json") -> dict:
    """{path: text} of each regular file named *`suffix` in each folder (not below; links not followed)."""
    found: dict = {}
    for folder in folders:
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(suffix) and entry.is_file(follow_symlinks=False):
                    found[entry.path] = read(entry.path)
    return found
