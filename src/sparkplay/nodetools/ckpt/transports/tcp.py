"""Plain TCP streams for a private point-to-point cable (no encryption).

Rank 0 starts the receiver on the peer through ssh for this run only and
hands it a fresh secret on the session's stdin (never a file, argv or log).
The receiver binds the peer's cable address (a bind failure ends it loudly),
accepts only rank 0's address, and lives exactly as long as that ssh
session: when the mirror ends, fails or is killed, the session closes and
the receiver exits. Both ends prove the secret (an HMAC over the other's
nonce), so the sender knows it talks to THIS run's receiver.
"""

from __future__ import annotations

import hmac
import io
import json
import os
import secrets
import shlex
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..common import CHUNK, Failure
from ..paths import Refused
from ..protocol import encode, read_frame
from ..sink import Sink
from .base import Job, Sent, failure_from, run_streams


def proof(secret: bytes, role: str, nonce: str) -> str:
    return hmac.new(secret, f"{role}:{nonce}".encode(), "sha256").hexdigest()


def local_address_towards(host: str) -> str:
    """The address this node sends from to reach host (what the receiver must allow)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return str(probe.getsockname()[0])


class TcpStream:
    def __init__(self, job: Job, port: int, secret: bytes) -> None:
        self.where = f"{job.host}:{port}"
        self.sock = socket.create_connection((job.host, port), timeout=job.idle_timeout)
        job.closers.append(lambda: self.sock.shutdown(socket.SHUT_RDWR))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.reader = self.sock.makefile("rb")
        hello = read_frame(self.reader)
        mine = secrets.token_hex(16)
        self.send(encode({"proof": proof(secret, "sender", str(hello.get("nonce"))), "nonce": mine}))
        answer = read_frame(self.reader)
        if not hmac.compare_digest(str(answer.get("proof", "")), proof(secret, "receiver", mine)):
            raise Failure(f"{self.where} is not this run's receiver (it could not prove the run's secret)")
        self.sock.settimeout(None)  # blocking for sendfile(); a stall is the watchdog's to end

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_file(self, fd: int, position: int, count: int) -> int:
        return os.sendfile(self.sock.fileno(), fd, position, min(count, CHUNK))

    def finish(self) -> None:
        self.sock.close()

    def failure(self, exc: Exception) -> Failure:
        self.sock.close()
        return Failure(f"the tcp stream to {self.where} failed: {exc}")


def send(job: Job) -> Sent:
    if not job.port:
        raise Failure("the tcp transport needs a port (checkpoint_receive_port)")
    secret = secrets.token_hex(32).encode()
    remote = [
        job.remote_tool,
        "receive",
        job.dest,
        "--address",
        job.host,
        "--port",
        str(job.port),
        "--allow",
        local_address_towards(job.host),
        "--idle-timeout",
        str(int(job.idle_timeout)),
    ]
    proc = subprocess.Popen(
        [*job.ssh, job.host, shlex.join(remote)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    job.procs.append(proc)
    assert proc.stdin is not None and proc.stdout is not None  # noqa: S101 - Popen with PIPE gives both
    try:
        proc.stdin.write(secret + b"\n")
        answers = io.BufferedReader(proc.stdout)  # type: ignore[arg-type]
        first = answers.readline(4096)
        if not first:
            raise failure_from(proc, f"the receiver on {job.host}")
        listening = json.loads(first).get("listening")
        if listening != job.port:
            raise Failure(f"the receiver on {job.host} said {first!r}, not that it listens on {job.port}")
        sent = run_streams(job, lambda _: TcpStream(job, job.port, secret))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    proc.stdin.close()  # the receiver ends with its session
    answers.read()
    if proc.wait(timeout=60) != 0:
        raise failure_from(proc, f"the receiver on {job.host}")
    return sent


def receive(dest: Path, address: str, port: int, allow: str, idle_timeout: float) -> dict[str, Any]:
    """The peer's end: the secret on stdin, listen, serve rank 0 until stdin closes or nothing moves."""
    secret = sys.stdin.buffer.readline().strip()
    if len(secret) < 32:
        raise Failure("the receiver needs the run's secret (at least 32 characters) on its first stdin line")
    activity = [time.monotonic()]
    sink = Sink(dest, on_bytes=lambda _: activity.__setitem__(0, time.monotonic()))
    errors: list[str] = []
    stop = threading.Event()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            if self.client_address[0] != allow:
                return
            activity[0] = time.monotonic()
            nonce = secrets.token_hex(16)
            self.wfile.write(encode({"nonce": nonce}))
            try:
                hello = read_frame(self.rfile)
                if not hmac.compare_digest(str(hello.get("proof", "")), proof(secret, "sender", nonce)):
                    return
                self.wfile.write(encode({"proof": proof(secret, "receiver", str(hello.get("nonce")))}))
                sink.serve(self.rfile, lambda data: self.wfile.write(encode(data)))
            except Refused as exc:
                errors.append(str(exc))
                stop.set()
            except (ConnectionError, OSError):
                pass  # the sender went away; it says why on its side

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True  # TIME_WAIT from an earlier run; a live listener still refuses the bind
        daemon_threads = True

    server = Server((address, port), Handler, bind_and_activate=False)
    try:
        server.server_bind()
        server.server_activate()
    except OSError as exc:
        server.server_close()
        raise Failure(f"cannot listen on {address}:{port}: {exc.strerror}") from None
    print(json.dumps({"listening": port}), flush=True)

    def stdin_closed() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        stop.set()

    threading.Thread(target=stdin_closed, daemon=True).start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    why = "session closed"
    while not stop.wait(1.0):
        if time.monotonic() - activity[0] > idle_timeout:
            why = f"nothing moved for {idle_timeout:.0f} s"
            break
    server.shutdown()
    server.server_close()
    sink.close()
    if errors:
        raise Failure(errors[0])
    return {"stopped": why, "files": sink.files, "bytes": sink.bytes}
