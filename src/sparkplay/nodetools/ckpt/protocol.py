"""The frames both ends of a stream speak (ssh and tcp transports alike).

One JSON object a line, each at most MAX_FRAME bytes; file data follows its
frame raw. Per file the sender names it (path, size, mode, mtime); the
receiver answers with the bytes it already holds (an interrupted copy resumes
there) or with an error; the sender sends the rest and the receiver confirms.
A link is one frame. `done` ends the stream with the receiver's counts.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from .common import Failure
from .paths import Refused

MAX_FRAME = 64 * 1024


def read_frame(rfile: BinaryIO) -> dict[str, Any]:
    raw = rfile.readline(MAX_FRAME + 1)
    if not raw:
        raise ConnectionError("the peer closed the stream")
    if len(raw) > MAX_FRAME or not raw.endswith(b"\n"):
        raise Refused("frame", f"longer than {MAX_FRAME} bytes")
    try:
        data = json.loads(raw)
    except ValueError:
        raise Refused("frame", "not JSON") from None
    if not isinstance(data, dict):
        raise Refused("frame", "not a JSON object")
    return data


def encode(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


def _answer(reader: BinaryIO, where: str) -> dict[str, Any]:
    try:
        reply = read_frame(reader)
    except Refused as exc:
        raise Failure(f"{where} answered badly: {exc}") from None
    if "error" in reply:
        raise Failure(f"{where} {reply['error']}")
    return reply


def send_entries(
    reader: BinaryIO,
    send: Callable[[bytes], None],
    send_file: Callable[[int, int, int], int],
    entries: list[dict[str, Any]],
    root: Path,
    restart: bool,
    moved: Callable[[int], None],
    where: str,
) -> tuple[int, int]:
    """Send entries over one stream; return (bytes of the files sent, bytes that crossed)."""
    transferred = crossed = 0
    for entry in entries:
        if entry["type"] == "symlink":
            send(encode({"path": entry["path"], "symlink": entry["target"]}))
            _answer(reader, where)
            continue
        # never through a link swapped in (an in-tree one the manifest lists is sent as a link; one it
        # resolved out of the tree on purpose is via_link), and a FIFO or device opened without blocking
        follow = 0 if entry.get("via_link") else os.O_NOFOLLOW
        try:
            fd = os.open(root / entry["path"], os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | follow)
        except OSError as exc:
            raise Failure(
                f"rank 0's {entry['path']} cannot be opened as the file its manifest lists ({exc.strerror}); run again"
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Failure(
                    f"rank 0's {entry['path']} is no longer a regular file; run again once nothing changes it"
                )
            if st.st_size != entry["size"]:
                raise Failure(f"rank 0's {entry['path']} changed since its manifest was made; run again")
            send(
                encode(
                    {
                        "path": entry["path"],
                        "size": st.st_size,
                        "mode": st.st_mode & 0o777,
                        "mtime_ns": st.st_mtime_ns,
                        "restart": restart or entry.get("restart", False),
                    }
                )
            )
            offset = _answer(reader, where).get("offset")
            if type(offset) is not int or not 0 <= offset <= st.st_size:
                raise Failure(f"{where} answered an impossible offset for {entry['path']}")
            position = offset
            while position < st.st_size:
                count = send_file(fd, position, st.st_size - position)
                if count <= 0:
                    raise ConnectionError("the stream stopped taking bytes")
                position += count
                moved(count)
        finally:
            os.close(fd)
        _answer(reader, where)
        transferred += st.st_size if offset < st.st_size else 0
        crossed += st.st_size - offset
    send(encode({"done": True}))
    _answer(reader, where)
    return transferred, crossed
