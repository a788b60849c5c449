#!/usr/bin/env python3
"""sparkplay-ckpt: download, manifest, mirror and verify a checkpoint on a node.

Installed on every node by the `checkpoint` role; standard library only,
except `download`, which uses huggingface_hub. Every command prints one JSON
object on stdout and exits non-zero with a one-line error on stderr.

    download  --repo ORG/NAME --revision REV --dest DIR [--token-file F] [--offline]
    resolve   --repo ORG/NAME [--revision REV]          -> {"commit": ...}
    manifest  DIR [--jobs N]                            -> DIR/.sparkplay/manifest.json
    need      DIR --manifest M                          -> bytes still to receive
    mirror    DIR --to HOST --dest DIR [--streams 8] [--cipher C] [--only LIST] [--progress F]
              [--transport ssh|rsync|rsyncd|tcp]
    sink      DIR                                       (the peer's end of the ssh transport: stdin/stdout)
    verify    DIR --manifest M [--full] [--jobs N]      -> mismatched/missing paths
    mark      DIR --manifest M --revision REV           -> DIR/.sparkplay/complete.json (written last)

A checkpoint's bookkeeping lives in DIR/.sparkplay/: manifest.json (made once
on rank 0, copied to every rank) and complete.json (each rank's own marker,
written only after everything verified and was fsynced).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import hmac
import io
import json
import os
import re
import shlex
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

META = ".sparkplay"
MANIFEST = f"{META}/manifest.json"
MARKER = f"{META}/complete.json"
LARGE = 64 * 1024 * 1024  # files above this get a stream of their own; the rest go in one sweep
HEX64 = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 8 * 1024 * 1024


class Failure(Exception):
    """One line for the user; exit 1."""


# --- small helpers -------------------------------------------------------------------------


def _write_json(path: Path, data: Any) -> None:
    """Atomically: temp file in the same folder, fsync, rename, fsync the folder.

    The same rule as sparkplay.fsutil.atomic_write, restated because this tool
    runs on nodes where the sparkplay package is not installed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(root: Path) -> list[Path]:
    """Every file and symlink under root, sorted, bookkeeping excluded."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(d for d in dirnames if not (rel == Path() and d == META))
        for d in list(dirnames):
            if (Path(dirpath) / d).is_symlink():  # a link to a folder is recorded, not walked
                dirnames.remove(d)
                found.append(rel / d)
        found.extend(rel / f for f in filenames)
    return sorted(found)


def _hf_sha256(root: Path, rel: Path) -> str | None:
    """The sha256 Hugging Face already gave for an LFS file, if this tree says it.

    A hub cache snapshot links each LFS file to blobs/<sha256>; a --local-dir
    download keeps .cache/huggingface/download/<path>.metadata whose second
    line is the etag (the sha256 for LFS files).
    """
    path = root / rel
    if path.is_symlink():
        name = path.readlink().name
        if HEX64.match(name):
            return name
    if rel.parent.name == "blobs" and HEX64.match(rel.name):  # a hub cache blob is named by its sha256
        return rel.name
    meta = root / ".cache/huggingface/download" / f"{rel}.metadata"
    try:
        lines = meta.read_text().splitlines()
    except OSError:
        return None
    etag = lines[1].strip().strip('"') if len(lines) > 1 else ""
    return etag if HEX64.match(etag) else None


def _load_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Failure(f"cannot read manifest {path}: {exc}") from None
    if data.get("format") != 1 or not isinstance(data.get("files"), list):
        raise Failure(f"{path} is not a sparkplay checkpoint manifest")
    return data


def manifest_digest(manifest: dict[str, Any]) -> str:
    body = json.dumps(manifest["files"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


# --- commands ------------------------------------------------------------------------------


def cmd_manifest(root: Path, jobs: int) -> dict[str, Any]:
    """List every file (path, size, sha256) and symlink (target) once, hashing in parallel."""
    if not root.is_dir():
        raise Failure(f"{root} is not a folder")
    entries: list[dict[str, Any]] = []
    to_hash: list[tuple[int, Path]] = []
    trusted = 0
    for rel in _walk(root):
        path = root / rel
        if path.is_symlink():
            target = str(path.readlink())
            resolved = path.resolve()
            if resolved.is_file() and str(resolved).startswith(str(root.resolve()) + os.sep):
                # an in-tree link (HF snapshot -> blob): keep the link, the blob is listed itself
                entries.append({"path": str(rel), "type": "symlink", "target": target})
                continue
            if not resolved.exists():
                raise Failure(f"{path} is a broken link ({target})")
            entries.append({"path": str(rel), "type": "symlink", "target": target})
            continue
        entry: dict[str, Any] = {"path": str(rel), "type": "file", "size": path.stat().st_size}
        known = _hf_sha256(root, rel)
        if known:
            entry["sha256"] = known
            entry["sha256_from"] = "huggingface"
            trusted += 1
        else:
            to_hash.append((len(entries), path))
        entries.append(entry)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:  # hashlib releases the GIL
        for (index, _), digest in zip(to_hash, pool.map(lambda item: _sha256(item[1]), to_hash), strict=True):
            entries[index]["sha256"] = digest
    manifest = {
        "format": 1,
        "files": entries,
        "bytes": sum(e.get("size", 0) for e in entries),
        "count": len(entries),
    }
    manifest["digest"] = manifest_digest(manifest)
    _write_json(root / MANIFEST, manifest)
    return {"manifest": str(root / MANIFEST), "files": len(entries), "bytes": manifest["bytes"],
            "hashed": len(to_hash), "sha256_from_huggingface": trusted, "digest": manifest["digest"]}  # fmt: skip


def _check_entry(root: Path, entry: dict[str, Any], full: bool) -> str | None:
    """None if the entry is right on disk, else why not ("missing", "size", "sha256", "link")."""
    path = root / entry["path"]
    if entry["type"] == "symlink":
        if not path.is_symlink():
            return "missing"
        return None if str(path.readlink()) == entry["target"] else "link"
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    if size != entry["size"]:
        return "size"
    if full and _sha256(path) != entry["sha256"]:
        return "sha256"
    return None


def cmd_verify(root: Path, manifest_path: Path, full: bool, jobs: int) -> dict[str, Any]:
    manifest = _load_manifest(manifest_path)
    entries = manifest["files"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda e: _check_entry(root, e, full), entries))
    bad = {e["path"]: why for e, why in zip(entries, results, strict=True) if why}
    return {
        "ok": not bad,
        "mode": "full" if full else "sizes",
        "checked": len(entries),
        "bytes_hashed": sum(e.get("size", 0) for e in entries) if full else 0,
        "bad": bad,
    }


def cmd_need(root: Path, manifest_path: Path) -> dict[str, Any]:
    """Bytes this rank still has to receive: files absent or of the wrong size."""
    manifest = _load_manifest(manifest_path)
    need = 0
    for entry in manifest["files"]:
        if entry["type"] == "file" and _check_entry(root, entry, full=False) is not None:
            path = root / entry["path"]
            have = path.stat().st_size if path.is_file() and not path.is_symlink() else 0
            # a shorter file is resumed where it stopped; a longer one is sent again
            need += entry["size"] - have if have <= entry["size"] else entry["size"]
    probe = root
    while not probe.exists():  # the folder may not exist yet: ask its filesystem
        probe = probe.parent
    stat = os.statvfs(probe)
    return {"need_bytes": need, "total_bytes": manifest["bytes"], "free_bytes": stat.f_bavail * stat.f_frsize}


def cmd_mark(root: Path, manifest_path: Path, revision: str) -> dict[str, Any]:
    manifest = _load_manifest(manifest_path)
    result = cmd_verify(root, manifest_path, full=False, jobs=8)
    if not result["ok"]:
        raise Failure(f"not marking {root} complete: {len(result['bad'])} file(s) missing or wrong")
    # make sure every byte is on disk before the marker says so
    for entry in manifest["files"]:
        if entry["type"] == "file":
            fd = os.open(root / entry["path"], os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    stats = {e["path"]: (root / e["path"]).stat().st_mtime_ns for e in manifest["files"] if e["type"] == "file"}
    marker = {
        "revision": revision,
        "manifest_digest": manifest["digest"],
        "files": manifest["count"],
        "bytes": manifest["bytes"],
        "mtimes": stats,
        "marked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_json(root / MARKER, marker)
    return {"marker": str(root / MARKER), "files": marker["files"], "bytes": marker["bytes"]}


def cmd_status(root: Path, manifest_digest_wanted: str | None, revision: str | None) -> dict[str, Any]:
    """Whether a valid marker says this rank is complete, with sizes and mtimes unchanged (no hashing)."""
    try:
        marker = json.loads((root / MARKER).read_text())
        manifest = _load_manifest(root / MANIFEST)
    except (OSError, ValueError, Failure):
        return {"complete": False, "why": "no marker"}
    if manifest_digest_wanted and marker.get("manifest_digest") != manifest_digest_wanted:
        return {"complete": False, "why": "marker is for another manifest"}
    if marker.get("manifest_digest") != manifest["digest"]:
        return {"complete": False, "why": "marker does not match the manifest here"}
    if revision and marker.get("revision") != revision:
        return {"complete": False, "why": f"marker is for revision {marker.get('revision')}"}
    mtimes = marker.get("mtimes", {})
    for entry in manifest["files"]:
        path = root / entry["path"]
        if _check_entry(root, entry, full=False) is not None:
            return {"complete": False, "why": f"{entry['path']} changed"}
        if entry["type"] == "file" and mtimes.get(entry["path"]) != path.stat().st_mtime_ns:
            return {"complete": False, "why": f"{entry['path']} was modified"}
    return {"complete": True, "files": marker["files"], "bytes": marker["bytes"], "revision": marker["revision"],
            "digest": manifest["digest"]}  # fmt: skip


# --- mirror --------------------------------------------------------------------------------


def _buckets(entries: list[dict[str, Any]], streams: int) -> list[list[dict[str, Any]]]:
    """Large files, biggest first, each to the stream with the fewest bytes so far."""
    large = sorted((e for e in entries if e["type"] == "file" and e["size"] > LARGE), key=lambda e: -e["size"])
    buckets: list[list[dict[str, Any]]] = [[] for _ in range(max(1, streams))]
    loads = [0] * len(buckets)
    for entry in large:
        i = loads.index(min(loads))
        buckets[i].append(entry)
        loads[i] += entry["size"]
    return [b for b in buckets if b]


class _Progress:
    """Bytes moved by every stream, written to a JSON file each second for the role to show."""

    def __init__(self, path: Path | None, total: int) -> None:
        self.path, self.total, self.start = path, total, time.monotonic()
        self.done: dict[int, int] = {}
        self.lock = threading.Lock()

    def update(self, stream: int, done: int) -> None:
        with self.lock:
            self.done[stream] = done

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            done = sum(self.done.values())
        elapsed = max(time.monotonic() - self.start, 1e-6)
        rate = done / elapsed
        left = max(self.total - done, 0)
        return {"bytes_done": done, "bytes_total": self.total, "rate_bps": rate,
                "eta_s": left / rate if rate > 0 else None, "elapsed_s": elapsed}  # fmt: skip

    def write(self) -> None:
        if self.path is not None:
            _write_json(self.path, self.snapshot())


@contextlib.contextmanager
def _reporting(progress: _Progress) -> Iterator[None]:
    """Write the progress file every second while the body runs, and once at the end."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(1.0):
            progress.write()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        progress.write()


PROGRESS2 = re.compile(r"^\s*([\d,]+)\s+\d+%")
TRANSFERRED = re.compile(r"Total transferred file size: ([\d,]+)")
LITERAL = re.compile(r"Literal data: ([\d,]+)")


def _rsync(args: list[str], stream: int, progress: _Progress) -> tuple[int, int, int, str]:
    """Run one rsync stream; return (rc, size of the files it transferred, bytes it actually
    sent as file data (a resumed or delta-copied file sends only what differs), last error line)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    transferred = literal = 0
    if proc.stdout is None:  # pragma: no cover - Popen with PIPE always has it
        raise Failure("rsync gave no output pipe")
    buffer = ""
    while True:
        chunk = proc.stdout.read(4096)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = re.split(r"[\r\n]", buffer)
        for line in lines:
            if match := PROGRESS2.match(line):
                progress.update(stream, int(match.group(1).replace(",", "")))
            elif match := TRANSFERRED.search(line):
                transferred = int(match.group(1).replace(",", ""))
            elif match := LITERAL.search(line):
                literal = int(match.group(1).replace(",", ""))
    if match := TRANSFERRED.search(buffer):
        transferred = int(match.group(1).replace(",", ""))
    if match := LITERAL.search(buffer):
        literal = int(match.group(1).replace(",", ""))
    err = proc.stderr.read() if proc.stderr else ""
    rc = proc.wait()
    last = next((line for line in reversed(err.splitlines()) if line.strip()), "")
    return rc, transferred, literal, last


RSYNCD_USER = "sparkplay"
RSYNCD_MODULE = "ckpt"


def _rsync_all(
    jobs: list[list[str]], sweep: list[str], host: str, progress: _Progress
) -> tuple[list[tuple[int, int, int, str]], int, int]:
    """The large-file streams in parallel, then the sweep; fail on the first error."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        results = list(pool.map(lambda pair: _rsync(pair[1], pair[0], progress), enumerate(jobs)))
    failed = [r for r in results if r[0] != 0]
    if failed:
        raise Failure(f"rsync to {host} failed (exit {failed[0][0]}): {failed[0][3]}")
    rc, swept, swept_sent, err = _rsync(sweep, len(jobs), progress)
    if rc != 0:
        raise Failure(f"rsync to {host} failed (exit {rc}): {err}")
    return results, swept, swept_sent


def _mirror_result(host: str, streams: int, transferred: int, sent: int, total: int, elapsed: float) -> dict[str, Any]:
    """What every transport reports: files' bytes sent, bytes that crossed, the rate."""
    return {"host": host, "streams": streams, "transferred_bytes": transferred, "sent_bytes": sent,
            "total_bytes": total, "seconds": round(elapsed, 3),
            "gbps": round(transferred / elapsed / 1e9, 3) if elapsed else None}  # fmt: skip


def cmd_mirror(
    root: Path, host: str, dest: str, streams: int, cipher: str, only: Path | None, progress_path: Path | None,
    ssh_options: list[str], bwlimit_kbps: int = 0, transport: str = "ssh", port: int = 0,
    password_file: Path | None = None, remote_tool: str = "",
) -> dict[str, Any]:  # fmt: skip
    manifest = _load_manifest(root / MANIFEST)
    entries = manifest["files"]
    if only is not None:
        wanted = {line.strip() for line in only.read_text().splitlines() if line.strip()}
        entries = [e for e in entries if e["path"] in wanted]
    ssh = ["ssh", "-T", "-x", "-o", "BatchMode=yes", "-o", "Compression=no"]
    if cipher:
        ssh += ["-c", cipher]
    ssh += ssh_options
    if transport == "ssh":
        progress = _Progress(progress_path, sum(e.get("size", 0) for e in entries))
        started = time.monotonic()
        with _reporting(progress):
            n, transferred, sent = _mirror_ssh(root, ssh, host, remote_tool or str(Path(sys.argv[0]).resolve()),
                                               dest.rstrip("/"), entries, streams, only is not None, progress,
                                               bwlimit_kbps)  # fmt: skip
        elapsed = time.monotonic() - started
        return _mirror_result(host, n, transferred, sent, progress.total, elapsed)
    if transport == "tcp":
        if password_file is None or not port:
            raise Failure("the tcp transport needs --port and --password-file")
        progress = _Progress(progress_path, sum(e.get("size", 0) for e in entries))
        started = time.monotonic()
        try:
            with _reporting(progress):
                n, transferred, sent = _mirror_tcp(
                    root, host, port, password_file, entries, streams, only is not None, progress
                )
        except (OSError, ConnectionError) as exc:
            raise Failure(f"tcp mirror to {host}:{port} failed: {exc}") from None
        elapsed = time.monotonic() - started
        return _mirror_result(host, n, transferred, sent, progress.total, elapsed)
    base = ["rsync", "-a", "--partial", "--numeric-ids", "--info=progress2", "--no-inc-recursive", "--stats"]
    if transport == "rsync":
        base += ["-e", shlex.join(ssh)]
        target = f"{host}:{dest.rstrip('/')}/"
    elif transport == "rsyncd":
        # plain TCP to a one-shot daemon on the peer's cable address (see `receive`): no
        # encryption, for a private point-to-point cable; authenticated by a per-run secret
        if password_file is None or not port:
            raise Failure("the rsyncd transport needs --port and --password-file")
        base.append(f"--password-file={password_file}")
        target = f"rsync://{RSYNCD_USER}@{host}:{port}/{RSYNCD_MODULE}/"
    else:
        raise Failure(f"unknown transport {transport!r}: use ssh, rsync, rsyncd or tcp")
    if bwlimit_kbps:
        base.append(f"--bwlimit={bwlimit_kbps}")
    progress = _Progress(progress_path, sum(e.get("size", 0) for e in entries))
    jobs: list[list[str]] = []
    lists: list[str] = []
    # a targeted re-copy (--only) sends just the listed files, whatever their size or mtime says
    big = _buckets(entries, streams) if only is None else []
    for bucket in big:
        fd, name = tempfile.mkstemp(prefix="sparkplay-mirror.", suffix=".list")
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(e["path"] + "\n" for e in bucket))
        lists.append(name)
        # --append-verify resumes an interrupted large file from where it stopped (rsync
        # refuses it together with -W, so the large files keep rsync's default)
        jobs.append([*base, "--append-verify", f"--files-from={name}", f"{root}/", target])
    # one sweep for the rest: small files, links, folders, the manifest; the large
    # files are already there and skipped by size and mtime; -W: no delta search
    # for the small files, pure overhead on a fast link
    sweep = [*base, "-W", f"--exclude=/{MARKER}", f"{root}/", target]
    if only is not None:
        fd, name = tempfile.mkstemp(prefix="sparkplay-mirror.", suffix=".list")
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(e["path"] + "\n" for e in entries) + MANIFEST + "\n")
        lists.append(name)
        sweep = [*base, "--ignore-times", f"--files-from={name}", f"{root}/", target]
    started = time.monotonic()
    try:
        with _reporting(progress):
            results, swept, swept_sent = _rsync_all(jobs, sweep, host, progress)
    finally:
        for name in lists:
            Path(name).unlink(missing_ok=True)
    elapsed = time.monotonic() - started
    transferred = sum(r[1] for r in results) + swept
    sent = sum(r[2] for r in results) + swept_sent
    return _mirror_result(host, len(jobs), transferred, sent, progress.total, elapsed)


def cmd_receive(
    dest: Path, address: str, port: int, secret_file: Path, allow: str, timeout: float, transport: str = "rsyncd"
) -> dict[str, Any]:
    """Receive into `dest` on the cable address until stopped or `timeout`: a one-shot rsync
    daemon (rsyncd) or sparkplay's own TCP receiver (tcp)."""
    secret = secret_file.read_text().strip()
    if not secret:
        raise Failure(f"{secret_file} is empty")
    if transport == "tcp":
        return _serve_tcp(dest, address, port, secret.encode(), allow, timeout)
    dest.mkdir(parents=True, exist_ok=True)
    run = Path("/run")
    secrets = run / f"sparkplay-rsyncd-{port}.secrets"
    fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{RSYNCD_USER}:{secret}\n")
    config = run / f"sparkplay-rsyncd-{port}.conf"
    config.write_text(
        f"pid file = {run}/sparkplay-rsyncd-{port}.pid\nuse chroot = no\n"
        f"[{RSYNCD_MODULE}]\n  path = {dest}\n  read only = false\n  uid = root\n  gid = root\n"
        # links as sent (HF snapshots link into blobs/): the only client is rank 0, authenticated
        f"  numeric ids = yes\n  munge symlinks = no\n  auth users = {RSYNCD_USER}\n  secrets file = {secrets}\n"
        f"  hosts allow = {allow}\n  hosts deny = *\n"
    )
    cmd = ["rsync", "--daemon", "--no-detach", f"--config={config}", f"--address={address}", f"--port={port}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"stopped": "timeout"}
    finally:
        secrets.unlink(missing_ok=True)
        config.unlink(missing_ok=True)
    if proc.returncode not in (0, -15, 143):
        raise Failure(f"rsync daemon on {address}:{port} failed: {proc.stderr.strip()}")
    return {"stopped": "signal", "rc": proc.returncode}


def cmd_stop(port: int) -> dict[str, Any]:
    for name in (f"sparkplay-rsyncd-{port}.pid", f"sparkplay-receive-{port}.pid"):
        try:
            pid = int((Path("/run") / name).read_text().strip())
            break
        except (OSError, ValueError):
            continue
    else:
        return {"stopped": False}
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return {"stopped": False}
    return {"stopped": True, "pid": pid}


# --- the tcp transport: plain TCP, parallel, resumable, for a private cable -----------------
#
# A receiver (`receive --transport tcp`) listens on its cable address and
# accepts only the sender's address after an HMAC challenge on a per-run
# secret. Per file the sender says path, size, mode and mtime; the receiver
# answers with the bytes it already has (a resumed file continues there);
# the sender sendfile()s the rest. Integrity is the manifest's job: every
# file is hashed on the receiver afterwards.


TCP_BUFFER = 4 << 20


def _line(sock_file: Any) -> dict[str, Any]:
    raw = sock_file.readline(65536)
    if not raw:
        raise ConnectionError("peer closed the connection")
    return json.loads(raw)


def _send_line(sock: socket.socket, data: dict[str, Any]) -> None:
    sock.sendall(json.dumps(data).encode() + b"\n")


def _safe_join(root: Path, rel: str) -> Path:
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise Failure(f"refusing path {rel!r}")
    return root.joinpath(*parts)


def _receive_frames(
    rfile: Any, reply: Callable[[dict[str, Any]], None], dest: Path, received: dict[str, int], lock: threading.Lock
) -> None:
    """Receive files over one stream (a socket, or stdin under ssh) until the sender says done.

    Per file the sender names it, the receiver answers with the size it already holds (an
    interrupted copy resumes there), the bytes follow, and the receiver confirms once the
    file is complete with its mtime and mode set.
    """
    buffer = bytearray(TCP_BUFFER)
    view = memoryview(buffer)
    while True:
        req = _line(rfile)
        if req.get("done"):
            return
        path = _safe_join(dest, req["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        if "symlink" in req:
            if path.is_symlink() or path.exists():
                path.unlink()
            path.symlink_to(req["symlink"])
            reply({"ok": True})
            continue
        size = int(req["size"])
        have = path.stat().st_size if path.is_file() and not path.is_symlink() else 0
        if req.get("restart") or have > size:
            have = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, have)
            os.lseek(fd, have, os.SEEK_SET)
            reply({"offset": have})
            left = size - have
            while left:
                # buffered bytes first (readline may have read ahead), then the stream
                n = rfile.readinto(view[: min(left, TCP_BUFFER)])
                if not n:
                    raise ConnectionError("sender stopped mid-file")
                os.write(fd, view[:n])
                left -= n
            os.utime(fd, ns=(req["mtime_ns"], req["mtime_ns"]))
            os.fchmod(fd, req.get("mode", 0o644))
        finally:
            os.close(fd)
        with lock:
            received["files"] += 1
            received["bytes"] += size - have
        reply({"ok": True})


def cmd_sink(dest: Path) -> dict[str, Any]:
    """The receiving end of the ssh transport: the protocol on stdin/stdout, ssh already authenticated."""
    dest.mkdir(parents=True, exist_ok=True)
    received = {"files": 0, "bytes": 0}
    out = sys.stdout.buffer

    def reply(data: dict[str, Any]) -> None:
        out.write(json.dumps(data).encode() + b"\n")
        out.flush()

    _receive_frames(sys.stdin.buffer, reply, dest, received, threading.Lock())
    return received


def _serve_tcp(dest: Path, address: str, port: int, secret: bytes, allow: str, timeout: float) -> dict[str, Any]:
    dest.mkdir(parents=True, exist_ok=True)
    received = {"files": 0, "bytes": 0}
    lock = threading.Lock()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            if self.client_address[0] != allow:
                return
            nonce = os.urandom(16).hex()
            _send_line(self.request, {"nonce": nonce})
            answer = _line(self.rfile).get("hmac", "")
            if not hmac.compare_digest(answer, hmac.new(secret, nonce.encode(), "sha256").hexdigest()):
                return
            _send_line(self.request, {"ok": True})
            _receive_frames(self.rfile, lambda data: _send_line(self.request, data), dest, received, lock)

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    with Server((address, port), Handler) as server:
        pid_file = Path("/run") / f"sparkplay-receive-{port}.pid"
        pid_file.write_text(f"{os.getpid()}\n")
        stop = threading.Event()

        def on_term(*_: Any) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_term)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        thread.start()
        stopped = "signal" if stop.wait(timeout) else "timeout"
        server.shutdown()
        pid_file.unlink(missing_ok=True)
    return {"stopped": stopped, **received}


def _send_entries(
    reader: Any, send_line: Callable[[dict[str, Any]], None], send_file: Callable[[Any, int, int], int],
    entries: list[dict[str, Any]], root: Path, restart: bool, stream: int, progress: _Progress, where: str,
) -> tuple[int, int]:  # fmt: skip
    """Send entries over one stream; return (bytes of files sent, bytes that crossed)."""
    transferred = sent = 0
    for entry in entries:
        path = root / entry["path"]
        if entry["type"] == "symlink":
            send_line({"path": entry["path"], "symlink": entry["target"]})
            _line(reader)
            continue
        st = path.stat()
        send_line({"path": entry["path"], "size": st.st_size, "mode": st.st_mode & 0o7777,
                   "mtime_ns": st.st_mtime_ns, "restart": restart or entry.get("restart", False)})  # fmt: skip
        offset = int(_line(reader)["offset"])
        with path.open("rb") as fh:
            position = offset
            while position < st.st_size:
                count = send_file(fh, position, min(st.st_size - position, 64 << 20))
                position += count
                progress.update(stream, progress.done.get(stream, 0) + count)
        if not _line(reader).get("ok"):
            raise Failure(f"{where} did not confirm {entry['path']}")
        transferred += st.st_size if offset < st.st_size else 0
        sent += st.st_size - offset
    send_line({"done": True})
    return transferred, sent


def _tcp_stream(
    root: Path, host: str, port: int, secret: bytes, entries: list[dict[str, Any]], restart: bool,
    stream: int, progress: _Progress,
) -> tuple[int, int]:  # fmt: skip
    """Send entries over one authenticated TCP connection."""
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        reader = sock.makefile("rb")
        nonce = _line(reader)["nonce"]
        _send_line(sock, {"hmac": hmac.new(secret, nonce.encode(), "sha256").hexdigest()})
        if not _line(reader).get("ok"):
            raise Failure(f"{host}:{port} refused the secret")
        return _send_entries(reader, lambda data: _send_line(sock, data), sock.sendfile, entries, root, restart,
                             stream, progress, f"{host}:{port}")  # fmt: skip


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _ssh_stream(
    root: Path, ssh: list[str], host: str, remote: list[str], entries: list[dict[str, Any]], restart: bool,
    stream: int, progress: _Progress, bwlimit_kbps: int,
) -> tuple[int, int]:  # fmt: skip
    """Send entries through one ssh session to `sparkplay-ckpt sink` on the peer (encrypted, ssh-authenticated)."""
    proc = subprocess.Popen([*ssh, host, shlex.join(remote)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None  # noqa: S101 - Popen with PIPE gives both
    out_fd = proc.stdin.fileno()
    reader = io.BufferedReader(proc.stdout)  # type: ignore[arg-type]
    started, moved = time.monotonic(), 0

    def send_file(fh: Any, position: int, count: int) -> int:
        nonlocal moved
        done = os.sendfile(out_fd, fh.fileno(), position, min(count, CHUNK))
        moved += done
        if bwlimit_kbps:  # a cap per stream, like rsync's --bwlimit
            ahead = moved / (bwlimit_kbps * 1024) - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        return done

    try:
        result = _send_entries(reader, lambda data: _write_all(out_fd, json.dumps(data).encode() + b"\n"),
                               send_file, entries, root, restart, stream, progress, host)  # fmt: skip
    except (OSError, ConnectionError, ValueError) as exc:
        proc.kill()
        err = (proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []) or [str(exc)]
        raise Failure(f"ssh stream to {host} failed: {err[-1]}") from None
    finally:
        proc.stdin.close()
    rc = proc.wait()
    if rc != 0:
        err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
        raise Failure(f"ssh stream to {host} ended with exit {rc}: {(err or ['no message'])[-1]}")
    return result


def _mirror_ssh(
    root: Path, ssh: list[str], host: str, remote_tool: str, dest: str, entries: list[dict[str, Any]],
    streams: int, restart: bool, progress: _Progress, bwlimit_kbps: int,
) -> tuple[int, int, int]:  # fmt: skip
    """The large files over parallel ssh streams, biggest first; then one sweep with the rest and the manifest."""
    remote = [remote_tool, "sink", dest]
    queues = _buckets(entries, streams)
    big = {e["path"] for b in queues for e in b}
    sweep = [e for e in entries if e["path"] not in big]
    # the manifest is small and authoritative: always sent whole
    sweep.append({"path": MANIFEST, "type": "file", "size": (root / MANIFEST).stat().st_size, "restart": True})
    results: list[tuple[int, int]] = []
    if queues:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(queues)) as pool:
            futures = [pool.submit(_ssh_stream, root, ssh, host, remote, q, restart, i, progress, bwlimit_kbps)
                       for i, q in enumerate(queues)]  # fmt: skip
            results = [f.result() for f in futures]
    results.append(_ssh_stream(root, ssh, host, remote, sweep, restart, len(queues), progress, bwlimit_kbps))
    return len(queues) + 1, sum(r[0] for r in results), sum(r[1] for r in results)


def _mirror_tcp(
    root: Path, host: str, port: int, password_file: Path, entries: list[dict[str, Any]], streams: int,
    restart: bool, progress: _Progress,
) -> tuple[int, int, int]:  # fmt: skip
    secret = password_file.read_text().strip().encode()
    queues = [list(b) for b in _buckets(entries, streams)] or [[]]
    big = {e["path"] for b in queues for e in b}
    for i, entry in enumerate(e for e in entries if e["path"] not in big):
        queues[i % len(queues)].append(entry)
    manifest = root / MANIFEST
    queues[0].append({"path": MANIFEST, "type": "file", "size": manifest.stat().st_size})
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(queues)) as pool:
        futures = [pool.submit(_tcp_stream, root, host, port, secret, q, restart, i, progress)
                   for i, q in enumerate(queues)]  # fmt: skip
        results = [f.result() for f in futures]
    return len(queues), sum(r[0] for r in results), sum(r[1] for r in results)


# --- download ------------------------------------------------------------------------------


def _hub(token_file: Path | None) -> tuple[Any, str | None]:
    try:
        import huggingface_hub
    except ImportError:
        raise Failure("huggingface_hub is not installed (the checkpoint role installs it on rank 0)") from None
    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip() or None
        except OSError as exc:
            raise Failure(f"cannot read the token file {token_file}: {exc.strerror}") from None
    return huggingface_hub, token


def _first_line(exc: Exception) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {text}"


def cmd_resolve(repo: str, revision: str | None, token_file: Path | None) -> dict[str, Any]:
    hub, token = _hub(token_file)
    try:
        info = hub.HfApi().model_info(repo, revision=revision, token=token)
    except Exception as exc:
        raise Failure(f"cannot resolve {repo}@{revision or 'main'}: {_first_line(exc)}") from None
    return {"repo": repo, "revision": revision, "commit": info.sha}


def cmd_download(repo: str, revision: str, dest: Path, token_file: Path | None, offline: bool) -> dict[str, Any]:
    hub, token = _hub(token_file)
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        path = hub.snapshot_download(repo_id=repo, revision=revision, local_dir=str(dest), token=token)
    except Exception as exc:
        raise Failure(f"download of {repo}@{revision} failed: {_first_line(exc)}") from None
    files = [p for p in _walk(Path(path)) if not str(p).startswith(".cache")]
    return {"repo": repo, "revision": revision, "dest": str(path), "files": len(files)}


# --- entry point ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkplay-ckpt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    jobs = max(2, os.cpu_count() or 2)

    p = sub.add_parser("manifest")
    p.add_argument("dir", type=Path)
    p.add_argument("--jobs", type=int, default=jobs)
    p = sub.add_parser("verify")
    p.add_argument("dir", type=Path)
    p.add_argument("--manifest", type=Path)
    p.add_argument("--full", action="store_true")
    p.add_argument("--jobs", type=int, default=jobs)
    p = sub.add_parser("need")
    p.add_argument("dir", type=Path)
    p.add_argument("--manifest", type=Path, required=True)
    p = sub.add_parser("mark")
    p.add_argument("dir", type=Path)
    p.add_argument("--manifest", type=Path)
    p.add_argument("--revision", required=True)
    p = sub.add_parser("status")
    p.add_argument("dir", type=Path)
    p.add_argument("--digest")
    p.add_argument("--revision")
    p = sub.add_parser("mirror")
    p.add_argument("dir", type=Path)
    p.add_argument("--to", required=True, dest="host")
    p.add_argument("--dest", required=True)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--cipher", default="aes128-gcm@openssh.com")
    p.add_argument("--only", type=Path)
    p.add_argument("--progress", type=Path)
    p.add_argument("--ssh-option", action="append", default=[], dest="ssh_options")
    p.add_argument("--bwlimit", type=int, default=0, help="KiB/s per stream (0: no limit)")
    p.add_argument("--transport", choices=["ssh", "rsync", "rsyncd", "tcp"], default="ssh")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--password-file", type=Path)
    p.add_argument("--remote-tool", default="", help="this tool's path on the peer (default: the same as here)")
    p = sub.add_parser("sink")
    p.add_argument("dest", type=Path)
    p = sub.add_parser("receive")
    p.add_argument("dest", type=Path)
    p.add_argument("--address", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--secret-file", type=Path, required=True)
    p.add_argument("--allow", required=True, help="the sender's address")
    p.add_argument("--timeout", type=float, default=43200)
    p.add_argument("--transport", choices=["rsyncd", "tcp"], default="rsyncd")
    p = sub.add_parser("stop")
    p.add_argument("--port", type=int, required=True)
    p = sub.add_parser("resolve")
    p.add_argument("--repo", required=True)
    p.add_argument("--revision")
    p.add_argument("--token-file", type=Path)
    p = sub.add_parser("download")
    p.add_argument("--repo", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--token-file", type=Path)
    p.add_argument("--offline", action="store_true")

    args = parser.parse_args(argv)
    try:
        if args.command == "manifest":
            result = cmd_manifest(args.dir, args.jobs)
        elif args.command == "verify":
            result = cmd_verify(args.dir, args.manifest or args.dir / MANIFEST, args.full, args.jobs)
        elif args.command == "need":
            result = cmd_need(args.dir, args.manifest)
        elif args.command == "mark":
            result = cmd_mark(args.dir, args.manifest or args.dir / MANIFEST, args.revision)
        elif args.command == "status":
            result = cmd_status(args.dir, args.digest, args.revision)
        elif args.command == "mirror":
            result = cmd_mirror(args.dir, args.host, args.dest, args.streams, args.cipher, args.only,
                                args.progress, args.ssh_options, args.bwlimit, args.transport, args.port,
                                args.password_file, args.remote_tool)  # fmt: skip
        elif args.command == "sink":
            result = cmd_sink(args.dest)
        elif args.command == "receive":
            result = cmd_receive(args.dest, args.address, args.port, args.secret_file, args.allow, args.timeout,
                                 args.transport)  # fmt: skip
        elif args.command == "stop":
            result = cmd_stop(args.port)
        elif args.command == "resolve":
            result = cmd_resolve(args.repo, args.revision, args.token_file)
        else:
            result = cmd_download(args.repo, args.revision, args.dest, args.token_file, args.offline)
    except Failure as exc:
        print(f"sparkplay-ckpt: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0 if result.get("ok", True) else 3


if __name__ == "__main__":
    sys.exit(main())
