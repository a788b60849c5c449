"""What every transport shares: the job, progress, and parallel streams of frames."""

from __future__ import annotations

import concurrent.futures
import contextlib
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol

from ..common import Failure
from ..protocol import send_entries

LARGE = 64 * 1024 * 1024  # files above this get a stream of their own; the rest go in one sweep


class Progress:
    """Bytes moved by every stream, and when bytes last moved (for the stall watchdog)."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.start = self.last_moved = time.monotonic()
        self.lock = threading.Lock()

    def moved(self, count: int) -> None:
        with self.lock:
            self.done += count
            self.last_moved = time.monotonic()

    def set_done(self, done: int) -> None:
        with self.lock:
            if done != self.done:
                self.done, self.last_moved = done, time.monotonic()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            done = self.done
        elapsed = max(time.monotonic() - self.start, 1e-6)
        rate = done / elapsed
        left = max(self.total - done, 0)
        return {
            "bytes_done": done,
            "bytes_total": self.total,
            "rate_bps": rate,
            "eta_s": left / rate if rate > 0 else None,
            "elapsed_s": elapsed,
        }


@dataclass
class Job:
    """One mirror of `entries` from rank 0's `root` to `dest` on `host`."""

    root: Path
    host: str
    dest: str
    entries: list[dict[str, Any]]
    streams: int
    restart: bool  # re-send whole files (a targeted re-copy of files found wrong)
    progress: Progress
    ssh: list[str]  # ssh and its options, without the host
    remote_tool: str
    bwlimit_kbps: int = 0
    port: int = 0
    idle_timeout: float = 600.0
    # what to kill when the run must end now (stall, signal): filled by the transport
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def abort(self) -> None:
        for proc in list(self.procs):
            if proc.poll() is None:
                proc.kill()
        for close in list(self.closers):
            with contextlib.suppress(OSError):
                close()


class Sent(NamedTuple):
    streams: int
    transferred: int  # bytes of the files sent
    crossed: int  # bytes that crossed (a resumed file sends only its tail)
    seconds: float = 0.0  # from the first stream opening to the last one done


class Stream(Protocol):
    reader: BinaryIO

    def send(self, data: bytes) -> None: ...
    def send_file(self, fd: int, position: int, count: int) -> int: ...
    def finish(self) -> None: ...
    def failure(self, exc: Exception) -> Failure: ...


def buckets(entries: list[dict[str, Any]], streams: int) -> list[list[dict[str, Any]]]:
    """Large files, biggest first, each to the stream with the fewest bytes so far."""
    large = sorted((e for e in entries if e["type"] == "file" and e["size"] > LARGE), key=lambda e: -e["size"])
    queues: list[list[dict[str, Any]]] = [[] for _ in range(max(1, streams))]
    loads = [0] * len(queues)
    for entry in large:
        i = loads.index(min(loads))
        queues[i].append(entry)
        loads[i] += entry["size"]
    return [q for q in queues if q]


def spread(entries: list[dict[str, Any]], streams: int) -> list[list[dict[str, Any]]]:
    """Every entry on some stream: the large files as `buckets` does, then the rest, each to the
    stream with the fewest bytes so far (so small files do not wait in one serial tail)."""
    queues = buckets(entries, streams) or [[]]
    big = {e["path"] for q in queues for e in q}
    loads = [sum(e["size"] for e in q) for q in queues]
    for entry in entries:
        if entry["path"] in big:
            continue
        i = loads.index(min(loads))
        queues[i].append(entry)
        loads[i] += entry.get("size", 0) + 4096  # a link or a small file still costs a round trip
    return queues


def paced(job: Job, send_file: Callable[[int, int, int], int]) -> Callable[[int, int, int], int]:
    """send_file held to job.bwlimit_kbps per stream, like rsync's --bwlimit."""
    if not job.bwlimit_kbps:
        return send_file
    started, moved = time.monotonic(), 0

    def send(fd: int, position: int, count: int) -> int:
        nonlocal moved
        done = send_file(fd, position, min(count, 1 << 20))
        moved += done
        ahead = moved / (job.bwlimit_kbps * 1024) - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
        return done

    return send


def run_streams(job: Job, open_stream: Callable[[int], Stream]) -> Sent:
    """Every entry over parallel streams: large files biggest first, then the rest spread by bytes."""
    started = time.monotonic()
    queues = spread(job.entries, job.streams)

    def one(index: int, entries: list[dict[str, Any]]) -> tuple[int, int]:
        stream = open_stream(index)
        try:
            result = send_entries(
                stream.reader,
                stream.send,
                paced(job, stream.send_file),
                entries,
                job.root,
                job.restart,
                job.progress.moved,
                job.host,
            )
        except (OSError, ConnectionError) as exc:
            raise stream.failure(exc) from None
        stream.finish()
        return result

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(queues)) as pool:
        futures = [pool.submit(one, i, q) for i, q in enumerate(queues)]
        try:
            results = [f.result() for f in futures]
        except BaseException:
            job.abort()  # one stream failed: end the others now rather than after their files
            raise
    seconds = time.monotonic() - started
    return Sent(len(results), sum(r[0] for r in results), sum(r[1] for r in results), seconds)


def failure_from(proc: subprocess.Popen[bytes], what: str) -> Failure:
    """A Failure carrying the last line the remote end wrote on stderr."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
    return Failure(f"{what} ended (exit {proc.returncode}): {(err or ['no message'])[-1]}")
