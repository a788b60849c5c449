"""Which files on a node sparkplay may update without asking (runs on the node: standard library only).

sparkplay keeps a registry on each node (/etc/sparkplay/managed-files.json)
of the sha256 of every file it wrote. A file that exists and whose content
is not what sparkplay last wrote there is someone else's (a user's own
netplan file, or one they edited since): replacing it needs confirmation.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def state(path: str) -> dict:
    """exists, isdir and (for a file) the sha256 of `path`; a link is looked through, as a write would."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"exists": False, "isdir": False, "sha256": None}
    isdir = stat.S_ISDIR(st.st_mode)
    return {"exists": True, "isdir": isdir, "sha256": None if isdir else sha256_file(path)}


def load_registry(path: str) -> dict:
    """path -> sha256 of what sparkplay last wrote; an absent or unreadable registry knows nothing."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}
    )


def foreign(states: dict, registry: dict) -> list:
    """Paths that exist and differ from what sparkplay recorded (a folder in the way counts too)."""
    return [p for p, s in states.items() if s["exists"] and (s["isdir"] or registry.get(p) != s["sha256"])]


def recorded(states: dict, registry: dict) -> dict:
    """The registry updated with the files just written (sorted for stable output)."""
    updated = dict(registry)
    for path, s in states.items():
        if s["exists"] and s["sha256"]:
            updated[path] = s["sha256"]
    return dict(sorted(updated.items()))


def write_registry(path: str, registry: dict) -> None:
    """Atomically: a temporary file beside it, fsynced, renamed over it (0644, its folder 0755)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".managed-files.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(registry, indent=4, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
