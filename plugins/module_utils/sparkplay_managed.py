"""Which files on a node sparkplay may update without asking, and how to undo it (on the node: stdlib only).

sparkplay keeps a registry on each node (/etc/sparkplay/managed-files.json):
for every file it wrote, the sha256 of what it wrote and, when the file was
someone else's before sparkplay first replaced it (confirmed), the backup
that holds those earlier bytes. A file that exists and whose content is not
what sparkplay last wrote there is someone else's: replacing it needs
confirmation. `reset` puts every file back as it was before sparkplay; a file
changed since sparkplay wrote it (the user's later edits) is named first, and
put back only when confirmed, its current bytes kept beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time

# Ansible's `backup: true` names: PATH.PID.YYYY-MM-DD@HH:MM:SS~
BACKUP = re.compile(r"\.\d+\.\d{4}-\d{2}-\d{2}@\d{2}:\d{2}:\d{2}~")


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
    """path -> {sha256, original}; an absent or unreadable registry knows nothing. (An older registry held
    the sha256 alone: read as an entry with no original.)"""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    entries = {}
    for key, value in data.items():
        if isinstance(value, str):
            value = {"sha256": value, "original": None}
        if isinstance(key, str) and isinstance(value, dict) and isinstance(value.get("sha256"), str):
            entries[key] = {"sha256": value["sha256"], "original": value.get("original")}
    return entries


def foreign(states: dict, registry: dict) -> list:
    """Paths that exist and differ from what sparkplay recorded (a folder in the way counts too)."""
    return [
        p
        for p, s in states.items()
        if s["exists"] and (s["isdir"] or (registry.get(p) or {}).get("sha256") != s["sha256"])
    ]


# backups kept of each file sparkplay rewrites: every update of a deployment rewrites its record and the
# gateway's routes, and one backup per update would pile up for as long as the cluster serves (the soak found
# it); the file's original, the foreign one it replaced (the registry's), is kept whatever its age
KEEP_BACKUPS = 10


def prune_backups(path: str, spare: object = (), keep: int = KEEP_BACKUPS) -> list:
    """Remove all but the newest `keep` backups of `path`, sparing those in `spare`; the ones removed."""
    removed = []
    for old in backups_of(path)[: -keep or None]:
        if old in spare:
            continue
        try:
            os.remove(old)
        except OSError:
            continue
        removed.append(old)
    return removed


def backups_of(path: str) -> list:
    """The backups Ansible made of `path`, oldest first."""
    folder, name = os.path.split(path)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    found = [os.path.join(folder, f) for f in names if f.startswith(name) and BACKUP.fullmatch(f[len(name) :])]
    return sorted(found, key=lambda f: (os.stat(f).st_mtime_ns, f))


def recorded(states: dict, registry: dict) -> dict:
    """The registry updated with the files just written (sorted for stable output). A path sparkplay had
    not written before gets, as its original, the newest backup beside it: the foreign file it replaced."""
    updated = dict(registry)
    for path, s in states.items():
        if not (s["exists"] and s["sha256"]):
            continue
        if path in registry:
            updated[path] = {**registry[path], "sha256": s["sha256"]}
        else:
            earlier = backups_of(path)
            updated[path] = {"sha256": s["sha256"], "original": earlier[-1] if earlier else None}
    return dict(sorted(updated.items()))


def reset_plan(registry: dict) -> list:
    """What reset does to each file sparkplay wrote: (path, "restore", backup) or (path, "remove", None)."""
    plan = []
    for path, entry in sorted(registry.items()):
        original = entry.get("original")
        if original and os.path.isfile(original):
            plan.append((path, "restore", original))
        elif os.path.lexists(path):
            plan.append((path, "remove", None))
    return plan


EDITED = ".sparkplay-edited-"  # PATH.sparkplay-edited-YYYYmmddTHHMMSS~: not one of Ansible's backups


def edited(registry: dict) -> list:
    """The files sparkplay wrote that hold other bytes now (someone changed them since)."""
    found = []
    for path, entry in sorted(registry.items()):
        if os.path.isfile(path) and not os.path.islink(path) and sha256_file(path) != entry.get("sha256"):
            found.append(path)
    return found


def keep_copy(path: str) -> str:
    """The file's current bytes (and mode) beside it, under a name reset never removes."""
    copy = f"{path}{EDITED}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}~"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".sparkplay-keep.")
    with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
        shutil.copyfileobj(src, out)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
    os.replace(tmp, copy)
    return copy


def reset(registry_path: str, registry: dict) -> list:
    """Every file sparkplay wrote put back as before: a replaced file gets its earlier bytes (and mode) again,
    one sparkplay created is removed; sparkplay's backups of it go; the registry goes last. A file changed
    since sparkplay wrote it keeps its current bytes in a copy beside it first (the caller asked)."""
    done = []
    changed = set(edited(registry))
    for path, action, original in reset_plan(registry):
        if path in changed:
            done.append(f"kept the edited {path} as {keep_copy(path)}")
        if action == "restore":
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".sparkplay-restore.")
            with os.fdopen(fd, "wb") as out, open(original, "rb") as src:
                out.write(src.read())
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, stat.S_IMODE(os.stat(original).st_mode))
            os.replace(tmp, path)
        else:
            os.unlink(path)
        for backup in backups_of(path):
            os.unlink(backup)
        done.append(f"{action} {path}" + (f" from {original}" if original else ""))
    if os.path.exists(registry_path):
        os.unlink(registry_path)
    return done


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
