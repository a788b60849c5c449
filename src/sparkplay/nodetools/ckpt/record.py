"""Rank 0's record of each checkpoint's first verification: the source of truth, kept outside the folder.

The manifest inside a checkpoint folder travels with the folder: whoever can change the bytes can change
it too. So the first time rank 0 hashes a folder for a revision (from a download, checked against the hub's
sha256 where the hub gives one, or a staged folder at its first verification) its manifest is also kept here,
in a root-only folder of rank 0's own, and every later run holds the folder to it: a copy that changed is
refused, never hashed anew into a fresh manifest ("re-blessed"). Only an explicit accept, or a new revision,
replaces a record, and the record it replaces is kept beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from . import manifest as mf
from .common import Failure, write_json

FORMAT = 1


def _absolute(folder: Path) -> str:
    """The folder as the role names it (absolute; a link on the way is not resolved: the path is the name)."""
    return str(Path(folder).absolute())


def path_for(records: Path, folder: Path) -> Path:
    """One record per checkpoint folder, named from its absolute path (two names never share a record)."""
    key = hashlib.sha256(os.fsencode(_absolute(folder))).hexdigest()[:32]
    return records / f"{key}.json"


def _own_folder(records: Path) -> None:
    """The records' folder: made 0700, or, there already, a real folder of this user's (never a link)."""
    records.mkdir(mode=0o700, parents=True, exist_ok=True)
    seen = os.lstat(records)
    if not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.getuid():
        raise Failure(f"{records} is not a folder of this user's (a link, or another owner): remove it and run again")
    if stat.S_IMODE(seen.st_mode) != 0o700:
        records.chmod(0o700)


def load(records: Path, folder: Path) -> dict[str, Any] | None:
    """The record of `folder` (its manifest validated, its digest recomputed), or None when there is none."""
    where = path_for(records, folder)
    try:
        data = json.loads(where.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise Failure(
            f"cannot read the checkpoint record {where}: {exc}; remove it to record the folder anew"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("dir") != _absolute(folder):
        raise Failure(f"{where} is not sparkplay's record of {folder}; remove it to record the folder anew")
    data["manifest"] = mf.validate(data.get("manifest"), str(where))
    return data


def save(records: Path, folder: Path, manifest: dict[str, Any], revision: str, how: str) -> dict[str, Any]:
    """Keep `manifest` as the record of `folder` at `revision`; a record it replaces is kept beside it."""
    _own_folder(records)
    where = path_for(records, folder)
    previous = None
    if where.exists():
        previous = where.with_name(f"{where.stem}.replaced-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json")
        where.replace(previous)
    data = {
        "format": FORMAT,
        "dir": _absolute(folder),
        "revision": revision,
        "how": how,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "manifest": manifest,
    }
    write_json(where, data, mode=0o600)
    return {"record": str(where), "recorded_at": data["recorded_at"], "replaced": str(previous) if previous else None}


def differences(recorded: dict[str, Any], built: dict[str, Any]) -> dict[str, str]:
    """What differs between two manifests of one folder, a word per path (for a refusal or an accept)."""
    old = {e["path"]: e for e in recorded["files"]}
    new = {e["path"]: e for e in built["files"]}
    found: dict[str, str] = {}
    for rel in sorted(old.keys() | new.keys()):
        before, after = old.get(rel), new.get(rel)
        if before is None:
            found[rel] = "not in the record"
        elif after is None:
            found[rel] = "missing"
        elif before.get("type") != after.get("type"):
            found[rel] = "type"
        elif before.get("size") != after.get("size"):
            found[rel] = "size"
        elif before.get("sha256") != after.get("sha256") or before.get("target") != after.get("target"):
            found[rel] = "sha256" if before.get("type") == "file" else "link"
    return found
