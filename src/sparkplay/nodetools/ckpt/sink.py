"""The receiving end of a stream. It runs as root and trusts nothing the peer sends.

Every name is checked (paths.check_rel / check_link) before anything is
opened; folders are opened beneath the destination one component at a time
without following links; a link in the way is replaced, never written
through; a file shared by hard links is replaced, never written in place;
modes lose setuid, setgid, sticky and write bits for group and others;
nothing under .sparkplay/ is writable from the stream; sizes are bounded.
A refused frame is answered with the reason and ends the stream (exit 1):
nothing outside the destination changes.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from .paths import Refused, check_link, check_rel, clear_for, open_parent, open_tree, resolve
from .protocol import read_frame

MAX_FILE = 4 << 40  # 4 TiB: more than any one file of a checkpoint
BUFFER = 4 << 20


def _int(req: dict[str, Any], key: str, low: int, high: int, default: int | None = None) -> int:
    value = req.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise Refused(req.get("path"), f"{key} must be an integer from {low} to {high}")
    return value


class Sink:
    """Writes what one or more streams send beneath `dest` (threads may share one Sink)."""

    def __init__(self, dest: Path, on_bytes: Callable[[int], None] | None = None) -> None:
        self.dest = dest
        self.fd = open_tree(dest, create=True)
        self.files = self.bytes = 0
        self.lock = threading.Lock()
        self.links: dict[str, str] = {}  # the links this sink made: every chain through them stays inside
        self.on_bytes = on_bytes or (lambda _: None)

    def close(self) -> None:
        os.close(self.fd)

    def serve(self, rfile: BinaryIO, reply: Callable[[dict[str, Any]], None]) -> None:
        """Frames from one stream until `done`; a refused frame is answered with why, then raised."""
        buffer = memoryview(bytearray(BUFFER))
        try:
            while True:
                req = read_frame(rfile)
                if req.get("done") is True:
                    with self.lock:
                        reply({"done": True, "files": self.files, "bytes": self.bytes})
                    return
                if "symlink" in req:
                    self._link(req)
                    reply({"ok": True})
                else:
                    self._file(req, rfile, reply, buffer)
        except Refused as exc:
            reply({"error": str(exc)})
            raise

    def _link(self, req: dict[str, Any]) -> None:
        rel = req.get("path")
        parts = check_rel(rel)
        target = check_link(str(rel), req.get("symlink"))
        with self.lock:  # a link can reroute the chains of links sent before it: each is resolved again
            links = {**self.links, str(rel): target}
            for path in links:
                resolve(path, links)
            self.links = links
        parent = open_parent(self.fd, parts, create=True)
        try:
            clear_for(parent, parts[-1], str(rel), keep_regular=False)
            os.symlink(target, parts[-1], dir_fd=parent)
        finally:
            os.close(parent)

    def _file(
        self, req: dict[str, Any], rfile: BinaryIO, reply: Callable[[dict[str, Any]], None], buffer: memoryview
    ) -> None:
        rel = req.get("path")
        parts = check_rel(rel)
        size = _int(req, "size", 0, MAX_FILE)
        mode = _int(req, "mode", 0, 0o7777, 0o644) & 0o755  # no setuid/setgid/sticky, no group/other write
        mtime = _int(req, "mtime_ns", 0, 1 << 63)
        restart = req.get("restart", False) is True
        parent = open_parent(self.fd, parts, create=True)
        try:
            kept = clear_for(parent, parts[-1], str(rel), keep_regular=not restart)
            have = kept.st_size if kept is not None and kept.st_size <= size else 0
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        finally:
            os.close(parent)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # swapped under us: never write a shared inode
                raise Refused(rel, "not a private regular file when opened")
            os.ftruncate(fd, have)
            os.lseek(fd, have, os.SEEK_SET)
            reply({"offset": have})
            left = size - have
            while left:
                # bytes the frame reader buffered come first, then the stream
                n = rfile.readinto(buffer[: min(left, BUFFER)])  # type: ignore[attr-defined]
                if not n:
                    raise ConnectionError(f"the sender stopped in the middle of {rel}")
                view = buffer[:n]
                while view:
                    view = view[os.write(fd, view) :]
                left -= n
                self.on_bytes(n)
            os.utime(fd, ns=(mtime, mtime))
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        with self.lock:
            self.files += 1
            self.bytes += size - have
        reply({"ok": True})
