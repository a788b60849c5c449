"""rsync over ssh: the plain, well-known fallback (encrypted, slower).

The receiving rsync is told to keep the sender's names only: no owners,
groups, permissions or devices (-rlt: new files get ordinary modes), links
that would lead out of the tree arrive as the files they name
(--copy-unsafe-links), and .sparkplay/ is never touched (--exclude).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ..common import META, Failure
from .base import Job, Sent, buckets

PROGRESS2 = re.compile(r"^\s*([\d,]+)\s+\d+%")
TRANSFERRED = re.compile(r"Total transferred file size: ([\d,]+)")
LITERAL = re.compile(r"Literal data: ([\d,]+)")


def _number(pattern: re.Pattern[str], text: str) -> int:
    found = pattern.search(text)
    return int(found.group(1).replace(",", "")) if found else 0


def _run(job: Job, args: list[str], done: dict[int, int], index: int) -> tuple[int, int]:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    job.procs.append(proc)  # type: ignore[arg-type]
    assert proc.stdout is not None and proc.stderr is not None  # noqa: S101 - Popen with PIPE gives both
    tail = ""
    for chunk in iter(lambda: proc.stdout.read(4096), ""):  # type: ignore[union-attr]
        tail = (tail + chunk)[-8192:]
        for line in re.split(r"[\r\n]", chunk):
            if found := PROGRESS2.match(line):
                done[index] = int(found.group(1).replace(",", ""))
                job.progress.set_done(sum(done.values()))
    err = proc.stderr.read()
    if proc.wait() != 0:
        last = next((line for line in reversed(err.splitlines()) if line.strip()), "no message")
        raise Failure(f"rsync to {job.host} failed (exit {proc.returncode}): {last}")
    return _number(TRANSFERRED, tail), _number(LITERAL, tail)


def send(job: Job) -> Sent:
    base = [
        "rsync",
        "-rlt",
        "--partial",
        "--copy-unsafe-links",
        "--info=progress2",
        "--no-inc-recursive",
        "--stats",
        f"--exclude=/{META}/",
        "-e",
        shlex.join(job.ssh),
    ]
    if job.bwlimit_kbps:
        base.append(f"--bwlimit={job.bwlimit_kbps}")
    target = f"{job.host}:{job.dest.rstrip('/')}/"
    source = f"{job.root}/"
    lists: list[str] = []

    def listing(entries: list[dict[str, Any]]) -> str:
        fd, name = tempfile.mkstemp(prefix="sparkplay-rsync.", suffix=".list")
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(e["path"] + "\n" for e in entries))
        lists.append(name)
        return name

    jobs: list[list[str]] = []
    if job.restart:  # a targeted re-copy: just the listed files, whatever their size or mtime says
        sweep = [*base, "--ignore-times", f"--files-from={listing(job.entries)}", source, target]
    else:
        for queue in buckets(job.entries, job.streams):
            # --append-verify resumes an interrupted large file where it stopped
            jobs.append([*base, "--append-verify", f"--files-from={listing(queue)}", source, target])
        sweep = [*base, "-W", f"--files-from={listing(job.entries)}", source, target]
    done: dict[int, int] = {}
    started = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            results = list(pool.map(lambda pair: _run(job, pair[1], done, pair[0]), enumerate(jobs)))
        results.append(_run(job, sweep, done, len(jobs)))
    finally:
        for name in lists:
            Path(name).unlink()
    return Sent(len(results), sum(r[0] for r in results), sum(r[1] for r in results), time.monotonic() - started)
