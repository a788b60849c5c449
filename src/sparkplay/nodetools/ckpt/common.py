"""Errors, constants, atomic writes and hashing shared by every command."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

META = ".sparkplay"
MANIFEST = f"{META}/manifest.json"
MARKER = f"{META}/complete.json"
CHUNK = 8 * 1024 * 1024


class Failure(Exception):
    """One line for the user; exit 1."""


def write_json(path: Path, data: Any, mode: int = 0o644) -> None:
    """Atomically: temp file in the same folder, fsync, rename, fsync the folder.

    The same rule as sparkplay.fsutil.atomic_write, restated because this tool
    runs on nodes where the sparkplay package is not installed. The folder must
    be a real folder: sparkplay's bookkeeping is never written through a link.
    """
    if path.parent.is_symlink():
        raise Failure(f"{path.parent} is a link; sparkplay writes its bookkeeping only into a real folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def sha256_fd(fd: int) -> str:
    digest = hashlib.sha256()
    while chunk := os.read(fd, CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
