"""`sync`: rank 0 brings one peer's copy to rank 0's manifest, and proves it.

One command per peer, run on rank 0 (the role starts it and follows its
status file). Rank 0's own copy must be complete for the revision; its
manifest (digest recomputed) is the only truth: the peer is asked whether a
marker says it holds exactly that manifest for that revision, else whether
the bytes still missing fit, then takes the manifest, drops files rank 0 no
longer has, receives the rest over the transport, hashes everything against
the manifest and marks itself complete. Files that hash wrong are re-sent
whole once. A stall (no byte moved for --stall-timeout seconds) ends the run;
so do SIGTERM and a newer sync of the same folder to the same peer (it takes
over). Nothing the run started outlives it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import manifest as mf
from . import state, transports
from .common import MANIFEST, Failure, write_json
from .transports import Job, Progress

LOCKS = Path("/run/sparkplay-ckpt")


@dataclass
class Options:
    root: Path
    host: str
    dest: str
    revision: str
    transport: str = "ssh"
    streams: int = 8
    ssh: tuple[str, ...] = ("ssh",)
    remote_tool: str = "sparkplay-ckpt"
    bwlimit_kbps: int = 0
    port: int = 0
    full: bool = False
    stall_timeout: float = 600.0
    status_file: Path | None = None


def ssh_command(cipher: str, options: list[str]) -> list[str]:
    argv = ["ssh", "-T", "-x", "-o", "BatchMode=yes", "-o", "Compression=no", "-o", "ServerAliveInterval=15"]
    return argv + (["-c", cipher] if cipher else []) + options


class Peer:
    """The peer's sparkplay-ckpt, reached through ssh; every answer is one JSON object."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts

    def run(self, *args: str, stdin: str = "", ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
        remote = shlex.join([self.opts.remote_tool, *args])
        proc = subprocess.run(
            [*self.opts.ssh, self.opts.host, remote],
            input=stdin.encode(),
            capture_output=True,
            timeout=max(self.opts.stall_timeout, 60) * 10,
            check=False,
        )
        if proc.returncode not in ok:
            err = proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
            raise Failure(f"{self.opts.host}: {args[0]} failed (exit {proc.returncode}): {err[-1]}")
        try:
            return dict(json.loads(proc.stdout))
        except ValueError:
            raise Failure(f"{self.opts.host}: {args[0]} gave no JSON answer") from None


class Status:
    """The status file the role follows: phase, bytes, rate, ETA; finally the result or the error."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.phase = path, "starting"
        self.progress: Progress | None = None
        self.lock = threading.Lock()

    def write(self, **final: Any) -> None:
        if self.path is None:
            return
        with self.lock:
            data: dict[str, Any] = {"pid": os.getpid(), "phase": self.phase, "finished": False}
            if self.progress is not None:
                data.update(self.progress.snapshot())
            data.update(final)
            write_json(self.path, data, mode=0o600)


@contextlib.contextmanager
def _reporting(status: Status, job: Job | None, stall: float) -> Iterator[dict[str, bool]]:
    """Write the status file each second; end the transfer when no byte has moved for `stall` seconds."""
    stop = threading.Event()
    stalled = {"stalled": False}

    def loop() -> None:
        while not stop.wait(1.0):
            status.write()
            if job is not None and time.monotonic() - job.progress.last_moved > stall:
                stalled["stalled"] = True
                job.abort()
                return

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield stalled
    finally:
        stop.set()
        thread.join()


def _is_sync(pid: object) -> bool:
    """Whether pid is a running `sync` of this very tool file, by this user (a pid in a file may have been
    reused since, and any process may carry a `sync` argument: root signals none of those)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        owner = Path(f"/proc/{pid}").stat().st_uid
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    me = os.fsencode(os.path.realpath(sys.argv[0]))
    return owner == os.getuid() and any(
        arg == b"sync" and i > 0 and os.fsencode(os.path.realpath(os.fsdecode(argv[i - 1]))) == me
        for i, arg in enumerate(argv)
    )


def own_folder(path: Path) -> None:
    """sparkplay's run-time folder (locks, status files naming pids it signals): made 0700, or, already there,
    a real folder of this user's, tightened to 0700 (an earlier status write made it 0755)."""
    path.mkdir(mode=0o700, exist_ok=True)
    seen = os.lstat(path)
    if not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.getuid():
        raise Failure(
            f"{path} is not a folder of this user's (a link, or owned by uid {seen.st_uid}): remove it and run again"
        )
    if stat.S_IMODE(seen.st_mode) != 0o700:
        path.chmod(0o700)


@contextlib.contextmanager
def _only_run(opts: Options) -> Iterator[None]:
    """One sync per folder and peer: a newer one ends an older one still running (after a Ctrl-C, say)."""
    own_folder(LOCKS)
    key = hashlib.sha256(f"{opts.root}\0{opts.host}\0{opts.dest}".encode()).hexdigest()[:16]
    fd = os.open(LOCKS / f"sync-{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raw = os.pread(fd, 32, 0).decode(errors="replace").strip()
            pid = int(raw) if raw.isdigit() else 0
            # the lock names its holder; signal it only if it is still a sync (pids are reused)
            if _is_sync(pid):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise Failure(f"another sync of {opts.root} to {opts.host} (pid {pid}) did not stop") from None
                    time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _terminate(*_: Any) -> None:
    raise Failure("stopped by SIGTERM")


def sync(opts: Options, plan: bool = False) -> dict[str, Any]:
    """Bring the peer to rank 0's manifest for opts.revision (or, with plan, only say what that takes)."""
    status = Status(None if plan else opts.status_file)
    if plan:
        return _sync(opts, status, plan=True)
    signal.signal(signal.SIGTERM, _terminate)
    if opts.status_file and Path(opts.status_file).parent == LOCKS:
        own_folder(LOCKS)
    status.write()
    try:
        with _only_run(opts):
            result = _sync(opts, status, plan=False)
    except Failure as exc:
        status.phase = "failed"
        status.write(finished=True, rc=1, error=str(exc))
        raise
    status.phase = "done"
    status.write(finished=True, rc=0, result=result)
    return result


def _sync(opts: Options, status: Status, plan: bool) -> dict[str, Any]:
    started = time.monotonic()
    mine = state.status(opts.root, None, opts.revision)
    if not mine["complete"]:
        raise Failure(
            f"rank 0's {opts.root} is not complete for revision {opts.revision} ({mine['why']}); "
            "it is made and hashed on rank 0 first"
        )
    manifest = mf.load(opts.root / MANIFEST)
    digest, text = manifest["digest"], json.dumps(manifest)
    peer = Peer(opts)
    base = {"host": opts.host, "digest": digest, "revision": opts.revision, "total_bytes": manifest["bytes"]}
    status.phase = "checking"
    theirs = peer.run("status", opts.dest, "--digest", digest, "--revision", opts.revision)
    only: list[str] | None = None
    found: dict[str, str] = {}
    if (theirs.get("complete") and opts.full) or theirs.get("changed"):
        # a copy verified once (or asked to prove itself): hash it in full and name every file that differs,
        # then re-send those alone (a copy that was only touched is marked again, nothing sent)
        if plan and not opts.full:  # a plan stays cheap: the real run hashes
            room = peer.run("need", opts.dest, "--digest", digest, stdin=text)
            return {**base, "state": "changed", "why": theirs.get("why"), "only": None, "found": {}, **room}
        status.phase = "hashing"
        checked = peer.run("verify", opts.dest, "--digest", digest, "--full", ok=(0, 3))
        found = dict(checked.get("bad", {}))
        if checked.get("ok"):
            if theirs.get("complete"):
                return {**base, "state": "complete", "sent_bytes": 0, "hashed": True, "found": {}}
            if not plan:
                peer.run("mark", opts.dest, "--digest", digest, "--revision", opts.revision)
            return {**base, "state": "complete", "sent_bytes": 0, "hashed": True, "found": {}, "remarked": True}
        only = sorted(found)
    elif theirs.get("complete"):
        return {**base, "state": "complete", "sent_bytes": 0}
    room = peer.run("need", opts.dest, "--digest", digest, stdin=text)
    if plan:
        return {**base, "state": "needs", "only": only, "found": found, **room}
    if room["need_bytes"] > room["free_bytes"]:
        raise Failure(
            f"{opts.host} needs {room['need_bytes'] / 1e9:.2f} GB more for {opts.dest} but has "
            f"{room['free_bytes'] / 1e9:.2f} GB free. Free space or set sparkplay_model_root to a "
            "larger filesystem. Nothing was copied."
        )
    status.phase = "preparing"
    prepared = peer.run("prepare", opts.dest, "--digest", digest, stdin=text)
    changed = set(prepared.get("restart", []))
    entries = [{**e, "restart": e["path"] in changed} for e in manifest["files"] if only is None or e["path"] in only]
    moving = time.monotonic()
    sent = _send(opts, status, entries, restart=only is not None)
    moving = time.monotonic() - moving
    status.phase = "hashing"
    marked = peer.run("mark", opts.dest, "--digest", digest, "--revision", opts.revision, ok=(0, 3))
    resent: list[str] = []
    # a file that hashed wrong after the send: its size was right, its bytes not (only a changed copy has those)
    marked_bad: dict[str, str] = dict(marked.get("bad", {})) if theirs.get("changed") or only is not None else {}
    if not marked.get("ok", True):
        resent = sorted(marked.get("bad", {}))
        again_started = time.monotonic()
        again = _send(opts, status, [e for e in manifest["files"] if e["path"] in resent], restart=True)
        moving += time.monotonic() - again_started
        sent = transports.Sent(
            sent.streams,
            sent.transferred + again.transferred,
            sent.crossed + again.crossed,
            sent.seconds + again.seconds,
        )
        status.phase = "hashing"
        marked = peer.run("mark", opts.dest, "--digest", digest, "--revision", opts.revision, ok=(0, 3))
        if not marked.get("ok", True):
            raise Failure(f"{opts.host} still does not match rank 0 after a re-send: {', '.join(marked['bad'])}")
    elapsed = time.monotonic() - started
    return {
        **base,
        "state": "mirrored",
        "transport": opts.transport,
        "streams": sent.streams,
        "transferred_bytes": sent.transferred,
        "sent_bytes": sent.crossed,
        "only": only,
        # what this rank's copy of a verified manifest had wrong (path: what differed), each file re-sent
        "found": found | {path: why for path, why in marked_bad.items() if path not in found},
        "resent": resent,
        "pruned": prepared.get("pruned", []),
        "seconds": round(elapsed, 3),
        "transfer_seconds": round(moving, 3),
        "stream_seconds": round(sent.seconds, 3),
        "gbps": round(sent.transferred / elapsed / 1e9, 3) if elapsed else None,
    }


def _send(opts: Options, status: Status, entries: list[dict[str, Any]], restart: bool) -> transports.Sent:
    progress = Progress(sum(e.get("size", 0) for e in entries))
    job = Job(
        root=opts.root,
        host=opts.host,
        dest=opts.dest,
        entries=entries,
        streams=opts.streams,
        restart=restart,
        progress=progress,
        ssh=list(opts.ssh),
        remote_tool=opts.remote_tool,
        bwlimit_kbps=opts.bwlimit_kbps,
        port=opts.port,
        idle_timeout=opts.stall_timeout,
    )
    status.phase, status.progress = "sending", progress
    try:
        with _reporting(status, job, opts.stall_timeout) as watch:
            try:
                return transports.send(opts.transport, job)
            except (Failure, OSError, ConnectionError) as exc:
                if watch["stalled"]:
                    raise Failure(
                        f"no byte moved to {opts.host} for {opts.stall_timeout:.0f} s; run again to resume"
                    ) from None
                raise Failure(str(exc)) from None
    finally:
        job.abort()  # nothing this transfer started outlives it


def progress(path: Path, job: str | None) -> dict[str, Any]:
    """What the role prints while a sync runs: the status file, and whether its process still lives."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {"phase": "starting", "finished": False}
    if not data.get("finished"):
        pid = data.get("pid")
        gone = isinstance(pid, int) and not _is_sync(pid)
        if gone or (pid is None and _async_job_ended(job)):
            data.update(finished=True, rc=1, error="the mirror process ended without a result (killed?)")
    return data


def stop(path: Path) -> dict[str, Any]:
    """End the sync a status file names, if it still runs (a play that gave up following it), then remove the
    file once its sync is gone (each run has its own: none is left behind)."""
    try:
        pid = json.loads(path.read_text()).get("pid")
    except (OSError, ValueError):
        return {"stopped": False}
    stopped = _is_sync(pid)  # else gone, or the pid was reused
    if stopped:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _is_sync(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    if not _is_sync(pid) and path.is_file() and not path.is_symlink():
        path.unlink()
    return {"stopped": True, "pid": pid} if stopped else {"stopped": False}


def _async_job_ended(job: str | None) -> bool:
    """Whether Ansible's async job file says the job is over (it never started the tool, say)."""
    if not job:
        return False
    folder = Path(os.environ.get("ANSIBLE_ASYNC_DIR", "~/.ansible_async")).expanduser()
    try:
        data = json.loads((folder / job).read_text())
    except (OSError, ValueError):
        return False
    return bool(data.get("finished")) or "rc" in data
