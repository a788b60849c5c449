"""The default transport: parallel streams, each an ssh session to `sparkplay-ckpt sink` on the peer.

Encrypted and authenticated by the peer ssh trust (rank 0's key, from the
cable subnets only); rank 0 sendfile()s file data into the session.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess

from ..common import CHUNK, Failure
from .base import Job, Sent, failure_from, run_streams


class SshStream:
    def __init__(self, job: Job) -> None:
        remote = shlex.join([job.remote_tool, "sink", job.dest])
        self.host = job.host
        self.proc = subprocess.Popen(
            [*job.ssh, job.host, remote],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        job.procs.append(self.proc)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # noqa: S101 - Popen with PIPE
        self.out = self.proc.stdin.fileno()
        self.reader = io.BufferedReader(self.proc.stdout)  # type: ignore[arg-type]

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.out, view) :]

    def send_file(self, fd: int, position: int, count: int) -> int:
        return os.sendfile(self.out, fd, position, min(count, CHUNK))

    def finish(self) -> None:
        assert self.proc.stdin is not None  # noqa: S101
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            raise failure_from(self.proc, f"the ssh stream to {self.host}")

    def failure(self, exc: Exception) -> Failure:
        failed = failure_from(self.proc, f"the ssh stream to {self.host}")
        return failed if "no message" not in str(failed) else Failure(f"the ssh stream to {self.host} failed: {exc}")


def send(job: Job) -> Sent:
    return run_streams(job, lambda _: SshStream(job))
