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
    verify    DIR --manifest M [--full] [--jobs N]      -> mismatched/missing paths
    mark      DIR --manifest M --revision REV           -> DIR/.sparkplay/complete.json (written last)

A checkpoint's bookkeeping lives in DIR/.sparkplay/: manifest.json (made once
on rank 0, copied to every rank) and complete.json (each rank's own marker,
written only after everything verified and was fsynced).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
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
    """Atomically: temp file in the same folder, fsync, rename, fsync the folder."""
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


def cmd_mirror(
    root: Path, host: str, dest: str, streams: int, cipher: str, only: Path | None, progress_path: Path | None,
    ssh_options: list[str], bwlimit_kbps: int = 0,
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
    base = [
        "rsync", "-a", "--partial", "--numeric-ids", "--info=progress2", "--no-inc-recursive", "--stats",
        "-e", shlex.join(ssh),
    ]  # fmt: skip
    if bwlimit_kbps:
        base.append(f"--bwlimit={bwlimit_kbps}")
    target = f"{host}:{dest.rstrip('/')}/"
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
        # --append-verify resumes an interrupted large file from where it stopped
        jobs.append([*base, "--append-verify", f"--files-from={name}", f"{root}/", target])
    # one sweep for the rest: small files, links, folders, the manifest; the
    # large files are already there and skipped by size and mtime
    sweep = [*base, f"--exclude=/{MARKER}", f"{root}/", target]
    if only is not None:
        fd, name = tempfile.mkstemp(prefix="sparkplay-mirror.", suffix=".list")
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(e["path"] + "\n" for e in entries) + MANIFEST + "\n")
        lists.append(name)
        sweep = [*base, "--ignore-times", f"--files-from={name}", f"{root}/", target]
    started = time.monotonic()
    stop = threading.Event()

    def reporter() -> None:
        while not stop.wait(1.0):
            progress.write()

    thread = threading.Thread(target=reporter, daemon=True)
    thread.start()
    try:
        results: list[tuple[int, int, int, str]] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            results = list(pool.map(lambda pair: _rsync(pair[1], pair[0], progress), enumerate(jobs)))
        failed = [r for r in results if r[0] != 0]
        if failed:
            raise Failure(f"rsync to {host} failed (exit {failed[0][0]}): {failed[0][3]}")
        rc, swept, swept_sent, err = _rsync(sweep, len(jobs), progress)
        if rc != 0:
            raise Failure(f"rsync to {host} failed (exit {rc}): {err}")
    finally:
        stop.set()
        thread.join()
        progress.write()
        for name in lists:
            Path(name).unlink(missing_ok=True)
    elapsed = time.monotonic() - started
    transferred = sum(r[1] for r in results) + swept
    sent = sum(r[2] for r in results) + swept_sent
    gbps = round(transferred / elapsed / 1e9, 3) if elapsed else None
    return {"host": host, "streams": len(jobs), "transferred_bytes": transferred, "sent_bytes": sent,
            "total_bytes": progress.total, "seconds": round(elapsed, 3), "gbps": gbps}  # fmt: skip


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
                                args.progress, args.ssh_options, args.bwlimit)  # fmt: skip
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
