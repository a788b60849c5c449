"""Rank 0's manifest: every file (path, size, sha256) and in-tree link (target), and its digest.

The manifest is the source of truth for a run. Rank 0 makes it by reading
every byte it will serve (a hub's sha256 is a cross-check, never a
substitute), and every command that relies on one recomputes its digest
from the entries and checks each entry's form before using it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from .common import META, Failure, canonical, sha256_fd
from .paths import Refused, check_link, check_rel, resolve

FORMAT = 2
# huggingface_hub's own bookkeeping in a download folder (etags, timestamps): read for the cross-check, never
# part of the checkpoint (it changes when a file is fetched anew although the model's bytes do not)
HUB_BOOKKEEPING = ".cache"
HEX64 = re.compile(r"^[0-9a-f]{64}\Z")


def walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every non-folder entry under root with its lstat, sorted; links are listed, never followed (sparkplay's
    folder and the hub's bookkeeping at the top are not the checkpoint's).

    Iterative: a tree any depth deep (a peer could make one thousands of folders deep) is walked without
    recursion."""
    found: list[tuple[str, os.stat_result]] = []
    pending: list[tuple[Path, str]] = [(root, "")]
    while pending:
        folder, rel = pending.pop()
        with os.scandir(folder) as it:
            for entry in it:
                if not rel and entry.name in (META, HUB_BOOKKEEPING):
                    continue
                path = f"{rel}{entry.name}"
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    pending.append((Path(entry.path), f"{path}/"))
                else:
                    found.append((path, st))
    return sorted(found, key=lambda item: item[0])


def digest_of(files: list[dict[str, Any]]) -> str:
    return hashlib.sha256(canonical(files)).hexdigest()


def _hub_sha256(root: Path, rel: str) -> str | None:
    """The sha256 Hugging Face gave for an LFS file, where the tree records it (a cross-check only).

    A hub cache snapshot links each LFS file to blobs/<sha256>; a --local-dir
    download keeps .cache/huggingface/download/<path>.metadata whose second
    line is the etag (the sha256 for LFS files).
    """
    name = rel.rsplit("/", 1)[-1]
    if rel.split("/")[-2:-1] == ["blobs"] and HEX64.match(name):
        return name
    try:
        lines = (root / ".cache/huggingface/download" / f"{rel}.metadata").read_text().splitlines()
    except OSError:
        return None
    etag = lines[1].strip().strip('"') if len(lines) > 1 else ""
    return etag if HEX64.match(etag) else None


def _link_entry(root: Path, rel: str) -> dict[str, Any]:
    """An in-tree relative link stays a link; a link leading out of the tree is sent as the file it names."""
    path = root / rel
    target = str(path.readlink())
    try:
        check_link(rel, target)
        inside = True
    except Refused:
        inside = False
    resolved = path.resolve()
    if not resolved.exists():
        raise Failure(f"{path} is a broken link ({target}): fix or remove it on rank 0")
    if inside and str(resolved).startswith(str(root.resolve()) + os.sep):
        return {"path": rel, "type": "symlink", "target": target}
    if not resolved.is_file():
        raise Failure(f"{path} links to {resolved}, a folder outside the checkpoint: copy it in to mirror it")
    return {"path": rel, "type": "file", "size": resolved.stat().st_size, "via_link": True}


def _hash(root: Path, entry: dict[str, Any]) -> tuple[str, tuple[int, int, int]]:
    """sha256 of one file and its (size, mtime_ns, inode), refusing a file that changes meanwhile."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (0 if entry.get("via_link") else os.O_NOFOLLOW)
    fd = os.open(root / entry["path"], flags)
    try:
        before = os.fstat(fd)
        digest = sha256_fd(fd)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or after.st_size != entry["size"]:
        raise Failure(f"{root / entry['path']} changed while it was hashed; run again once nothing writes it")
    return digest, (after.st_size, after.st_mtime_ns, after.st_ino)


def build(root: Path, jobs: int) -> tuple[dict[str, Any], dict[str, list[int]], dict[str, int]]:
    """(manifest, stat snapshot per file for a marker, counts) of root, hashing every file in parallel."""
    if not root.is_dir():
        raise Failure(f"{root} is not a folder")
    entries: list[dict[str, Any]] = []
    for rel, st in walk(root):
        if stat.S_ISLNK(st.st_mode):
            entries.append(_link_entry(root, rel))
        elif stat.S_ISREG(st.st_mode):
            entries.append({"path": rel, "type": "file", "size": st.st_size})
        else:
            raise Failure(f"{root / rel} is not a file, folder or link; remove it from the checkpoint")
    files = [e for e in entries if e["type"] == "file"]
    snapshot: dict[str, list[int]] = {}
    crosschecked = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # hashlib releases the GIL
        for entry, (digest, stats) in zip(files, pool.map(lambda e: _hash(root, e), files), strict=True):
            entry["sha256"] = digest
            snapshot[entry["path"]] = list(stats)
            hub = _hub_sha256(root, entry["path"])
            if hub is not None:
                if hub != digest:
                    raise Failure(
                        f"{root / entry['path']} does not match the sha256 the hub gave ({hub[:12]}...): "
                        "the download is damaged; remove the file and run again"
                    )
                crosschecked += 1
    for entry in files:
        entry.pop("via_link", None)
    manifest = {
        "format": FORMAT,
        "files": entries,
        "bytes": sum(e.get("size", 0) for e in entries),
        "count": len(entries),
        "digest": digest_of(entries),
    }
    validate(manifest, str(root))
    return manifest, snapshot, {"hashed": len(files), "hub_crosschecked": crosschecked}


def validate(manifest: Any, where: str, wanted: str | None = None) -> dict[str, Any]:
    """The manifest if every entry is well formed and its digest recomputes to its field (and to `wanted`)."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise Failure(f"{where} is not a sparkplay checkpoint manifest (format {FORMAT})")
    if not isinstance(manifest.get("files"), list):
        raise Failure(f"{where} is not a sparkplay checkpoint manifest (format {FORMAT})")
    seen: set[str] = set()
    folders: set[str] = set()
    for entry in manifest["files"]:
        if not isinstance(entry, dict):
            raise Failure(f"{where}: an entry is not an object")
        rel = entry.get("path")
        try:
            parts = check_rel(rel)
            if entry.get("type") == "symlink":
                check_link(str(rel), entry.get("target"))
            elif entry.get("type") == "file":
                size, sha = entry.get("size"), entry.get("sha256")
                if type(size) is not int or size < 0 or not isinstance(sha, str) or not HEX64.match(sha):
                    raise Refused(rel, "a file entry needs an integer size and a sha256")
            else:
                raise Refused(rel, "an entry is a file or a symlink")
        except Refused as exc:
            raise Failure(f"{where}: {exc}") from None
        if rel in seen or rel in folders:
            raise Failure(f"{where}: {rel!r} is listed twice or is also a folder")
        seen.add(str(rel))
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = seen & folders
    if clash:
        raise Failure(f"{where}: {sorted(clash)[0]!r} is both an entry and a folder")
    links = {e["path"]: e["target"] for e in manifest["files"] if e["type"] == "symlink"}
    for rel in links:
        try:
            resolve(rel, links)
        except Refused as exc:
            raise Failure(f"{where}: {exc}") from None
    digest = digest_of(manifest["files"])
    if manifest.get("digest") != digest:
        raise Failure(f"{where}: its digest field does not match its entries (edited or damaged); refusing it")
    if wanted is not None and wanted != digest:
        raise Failure(
            f"{where} is not rank 0's manifest for this run (digest {digest[:12]}..., wanted {wanted[:12]}...)"
        )
    total = sum(e.get("size", 0) for e in manifest["files"])
    if manifest.get("bytes") != total or manifest.get("count") != len(manifest["files"]):
        raise Failure(f"{where}: its byte or entry count does not match its entries")
    return manifest


def load(path: Path, wanted: str | None = None) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Failure(f"cannot read manifest {path}: {exc}") from None
    return validate(data, str(path), wanted)


def loads(text: str, where: str, wanted: str | None = None) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise Failure(f"{where} is not JSON: {exc}") from None
    return validate(data, where, wanted)
