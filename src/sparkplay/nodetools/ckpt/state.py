"""One rank's copy against a manifest: verify, need, prepare, mark, status, prune.

Nothing here follows a link inside the checkpoint: a file entry must be a
regular file, a link entry a link with exactly the manifest's target.
A rank is complete only once `mark` has hashed every byte it holds against
the manifest; the marker then records the size, mtime and inode of each file
so a later quick `status` can trust it without hashing.
"""

from __future__ import annotations

import concurrent.futures
import os
import stat
import time
from pathlib import Path
from typing import Any

from . import manifest as mf
from . import record
from .common import MANIFEST, MARKER, Failure, sha256_fd, write_json
from .paths import Refused, check_rel, lstat_at, open_parent, open_tree


class Tree:
    """A checkpoint folder opened once; entries are reached beneath it without following links."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd = open_tree(root, create=False)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def lstat(self, rel: str) -> tuple[int, str, os.stat_result] | None:
        """(parent fd, name, lstat) of rel, or None when it or a folder on the way is missing or a link."""
        parts = check_rel(rel)
        try:
            parent = open_parent(self.fd, parts, create=False)
        except (FileNotFoundError, Refused):
            return None
        st = lstat_at(parent, parts[-1])
        if st is None:
            os.close(parent)
            return None
        return parent, parts[-1], st

    def check(self, entry: dict[str, Any], full: bool) -> tuple[str | None, list[int] | None]:
        """(None or why the entry is wrong here, [size, mtime_ns, inode] of a right file)."""
        found = self.lstat(entry["path"])
        if found is None:
            return "missing", None
        parent, name, st = found
        try:
            if entry["type"] == "symlink":
                if not stat.S_ISLNK(st.st_mode):
                    return "type", None
                return (None if os.readlink(name, dir_fd=parent) == entry["target"] else "link"), None
            if not stat.S_ISREG(st.st_mode):
                return "type", None
            if st.st_size != entry["size"]:
                return "size", None
            if not full:
                return None, [st.st_size, st.st_mtime_ns, st.st_ino]
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                if sha256_fd(fd) != entry["sha256"]:
                    return "sha256", None
                os.fsync(fd)  # the marker may follow: these bytes must be on disk first
                after = os.fstat(fd)
            finally:
                os.close(fd)
            return None, [after.st_size, after.st_mtime_ns, after.st_ino]
        finally:
            os.close(parent)


def _jobs() -> int:
    return max(2, os.cpu_count() or 2)


def verify(root: Path, manifest: dict[str, Any], full: bool, jobs: int = 0) -> dict[str, Any]:
    entries = manifest["files"]
    with Tree(root) as tree, concurrent.futures.ThreadPoolExecutor(max_workers=jobs or _jobs()) as pool:
        results = list(pool.map(lambda e: tree.check(e, full), entries))
    bad = {e["path"]: why for e, (why, _) in zip(entries, results, strict=True) if why}
    listed = {e["path"] for e in entries}
    # a tree holding what rank 0 does not list is not rank 0's tree (status refuses it too)
    bad |= {rel: "not in the manifest" for rel, _ in mf.walk(root) if rel not in listed}
    snapshot = {e["path"]: st for e, (why, st) in zip(entries, results, strict=True) if st is not None and not why}
    return {
        "ok": not bad,
        "mode": "full" if full else "sizes",
        "checked": len(entries),
        "bytes_hashed": sum(e.get("size", 0) for e in entries) if full else 0,
        "bad": bad,
        "digest": manifest["digest"],
        "_snapshot": snapshot,
    }


def need(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Bytes this rank still has to receive (absent files, the unsent tail of partial ones) and its free space."""
    want = 0
    probe = root
    while not probe.exists():  # the folder may not exist yet: ask its filesystem
        probe = probe.parent
    if root.is_dir():
        with Tree(root) as tree:
            for entry in manifest["files"]:
                if entry["type"] != "file":
                    continue
                found = tree.lstat(entry["path"])
                have = 0
                if found is not None:
                    os.close(found[0])
                    st = found[2]
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= entry["size"]:
                        have = st.st_size  # resumed where it stopped; anything else is sent whole
                want += entry["size"] - have
    else:
        want = sum(e.get("size", 0) for e in manifest["files"])
    vfs = os.statvfs(probe)
    return {"need_bytes": want, "total_bytes": manifest["bytes"], "free_bytes": vfs.f_bavail * vfs.f_frsize}


def drop_marker(root: Path) -> None:
    marker = root / MARKER
    if marker.is_symlink() or marker.exists():
        marker.unlink()


def prepare(root: Path, text: str, wanted: str) -> dict[str, Any]:
    """Take rank 0's manifest (digest checked) as this rank's, drop the old marker, say what is needed.

    Where a valid marker said this rank held an earlier manifest, a file whose
    sha256 changed is listed under `restart`: it is sent whole even when its
    size did not change (a resumed copy would keep the old bytes).
    """
    manifest = mf.loads(text, "rank 0's manifest", wanted)
    restart: list[str] = []
    if _status(root, None, None)["complete"]:
        old = {e["path"]: e.get("sha256") for e in mf.load(root / MANIFEST)["files"]}
        restart = [e["path"] for e in manifest["files"] if e["type"] == "file" and old.get(e["path"]) != e["sha256"]]
    os.close(open_tree(root, create=True))  # made, and every folder on the way root's alone
    drop_marker(root)
    write_json(root / MANIFEST, manifest)
    return {**need(root, manifest), "restart": restart}


def mark(
    root: Path, manifest: dict[str, Any], revision: str, snapshot: dict[str, list[int]] | None = None, jobs: int = 0
) -> dict[str, Any]:
    """Hash everything against the manifest (unless `snapshot` comes from hashing just now), then write the marker."""
    if snapshot is None:
        result = verify(root, manifest, full=True, jobs=jobs)
        if not result["ok"]:
            bad = ", ".join(sorted(result["bad"])[:5])
            raise Failure(f"not marking {root} complete: {len(result['bad'])} file(s) missing or wrong ({bad})")
        snapshot = result["_snapshot"]
    marker = {
        "revision": revision,
        "manifest_digest": manifest["digest"],
        "files": manifest["count"],
        "bytes": manifest["bytes"],
        "stat": snapshot,
        "marked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(root / MARKER, marker)
    return {
        "marker": str(root / MARKER),
        "files": marker["files"],
        "bytes": marker["bytes"],
        "revision": revision,
        "digest": manifest["digest"],
    }


def status(root: Path, wanted: str | None, revision: str | None, records: Path | None = None) -> dict[str, Any]:
    """Whether a marker says this rank holds exactly the manifest (for `wanted`/`revision`), without hashing.

    The local manifest's digest is recomputed, the marker must name it, and
    every file must still have the size, mtime and inode the marker
    recorded when it was hashed; a file added or removed voids it too.
    With `records` (rank 0), the manifest must also be the one recorded at the
    folder's first verification for this revision; `recorded` says whether
    there is such a record.
    """
    if records is None:
        return _status(root, wanted, revision)
    kept = record.load(records, root)
    same = kept is not None and kept["revision"] == revision
    if same:
        wanted = kept["manifest"]["digest"]
    seen = _status(root, wanted, revision)
    if same and not seen["complete"] and "wanted" in seen["why"]:
        seen["why"] = f"its manifest is not the one recorded at its first verification ({kept['recorded_at']})"
    return {**seen, "recorded": same}


def _status(root: Path, wanted: str | None, revision: str | None) -> dict[str, Any]:
    import json

    if not (root / MARKER).is_file():
        return {"complete": False, "why": "no marker"}
    try:
        manifest = mf.load(root / MANIFEST, wanted)
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError, Failure) as exc:
        return {"complete": False, "why": str(exc)}
    if not isinstance(marker, dict) or marker.get("manifest_digest") != manifest["digest"]:
        return {"complete": False, "why": "the marker is for another manifest"}
    if revision is not None and marker.get("revision") != revision:
        return {"complete": False, "why": f"the marker is for revision {marker.get('revision')}"}
    snapshot = marker.get("stat")
    if not isinstance(snapshot, dict):
        return {"complete": False, "why": "the marker records no file state"}
    # from here on this rank was marked complete for exactly this manifest, and something changed since:
    # `changed` tells a copy damaged after it was verified from one never finished
    listed = {e["path"] for e in manifest["files"]}
    extra = [rel for rel, _ in mf.walk(root) if rel not in listed]
    if extra:
        return {"complete": False, "changed": True, "why": f"{extra[0]} is not in the manifest"}
    with Tree(root) as tree:
        for entry in manifest["files"]:
            why, st = tree.check(entry, full=False)
            if why:
                return {"complete": False, "changed": True, "why": f"{entry['path']}: {why}"}
            if entry["type"] == "file" and snapshot.get(entry["path"]) != st:
                return {"complete": False, "changed": True, "why": f"{entry['path']} was modified since it was hashed"}
    return {
        "complete": True,
        "files": manifest["count"],
        "bytes": manifest["bytes"],
        "revision": marker.get("revision"),
        "digest": manifest["digest"],
    }


def prune(root: Path, manifest: dict[str, Any]) -> list[str]:
    """Remove files and links that rank 0's manifest no longer lists (never through a link)."""
    if not root.is_dir():
        return []
    listed = {e["path"] for e in manifest["files"]}
    removed = []
    with Tree(root) as tree:
        for rel, _ in mf.walk(root):
            if rel in listed:
                continue
            found = tree.lstat(rel)
            if found is None:
                continue
            parent, name, _ = found
            try:
                os.unlink(name, dir_fd=parent)
            finally:
                os.close(parent)
            removed.append(rel)
    return removed
