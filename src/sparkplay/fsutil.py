"""Filesystem helpers shared by everything that writes configuration."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, content: str | bytes, mode: int = 0o644) -> bool:
    """Write `content` to `path` atomically; return False when it was already there.

    The temporary file lives in the target's directory so the final rename
    never crosses a filesystem, and it is fsynced first so a crash leaves
    either the old file or the new one, never half of either.
    """
    try:
        same = path.read_bytes() == content if isinstance(content, bytes) else path.read_text() == content
        if same and (path.stat().st_mode & 0o777) == mode:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


def read_small_text(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes when it is text of at most `limit` bytes (no NUL), read no further than that;
    None for a link, anything not a regular file, a larger file or a binary one."""
    try:
        if not path.is_file() or path.is_symlink():
            return None
        with path.open("rb") as handle:
            body = handle.read(limit + 1)
    except OSError:
        return None
    return None if len(body) > limit or b"\0" in body else body
