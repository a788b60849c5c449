"""The overlay's source: a checkpoint folder read and proven (shards, index, tensors, its verified manifest).

Every bad source (missing or truncated shard, broken index, a tensor named
but absent, wrong dtype or shape) is refused here in one line, before the
converter writes anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparkplay.nvfp4 import atlas, kernel
from sparkplay.nvfp4.safetensors import SafetensorsError, TensorInfo, read_header

# the overlay's own files (its receipt; the partial receipts of an interrupted run)
RECEIPT = "sparkplay-overlay.json"
PARTIAL_DIR = ".sparkplay-overlay-partial"
PIECE = 4 << 20  # tensors are hashed and written in pieces of this size, in parallel
INDEX = "model.safetensors.index.json"
HASH_CHUNK = 1 << 20  # small: a hashing thread's buffer is memory the converter holds
CKPT_MANIFEST = ".sparkplay/manifest.json"  # sparkplay-ckpt's, verified on this rank (docs/checkpoints.md)
CKPT_MARKER = ".sparkplay/complete.json"


class OverlayError(ValueError):
    """A one-line reason the overlay cannot be made or is not valid; nothing was written."""


def _sha(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tensor_digest(data: Any) -> str:
    """A tensor payload's digest: its 4 MiB pieces hashed in parallel (hashlib releases the GIL), then the
    sha256 of their digests in order. One sha256 stream over a tensor would bound the converter at one core's
    hashing rate; this one scales with the cores and binds every byte just the same."""
    view = memoryview(data).cast("B")
    pieces = [view[i : i + PIECE] for i in range(0, len(view), PIECE)] or [view]
    if len(pieces) == 1:
        digests = [hashlib.sha256(pieces[0]).digest()]
    else:
        digests = list(kernel.pool().map(lambda piece: hashlib.sha256(piece).digest(), pieces))
    return hashlib.sha256(b"".join(digests)).hexdigest()


def read_tensor(path: Path, info: TensorInfo) -> np.ndarray:
    """A tensor's bytes, read in 4 MiB pieces in parallel (one thread's copy from the page cache is slow)."""
    buf = np.empty(info.nbytes, dtype=np.uint8)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:

        def piece(offset: int) -> None:
            end = min(offset + PIECE, info.nbytes)
            while offset < end:
                got = os.preadv(fd, [view[offset:end]], info.start + offset)
                if got <= 0:
                    raise SafetensorsError(f"{path}: tensor {info.name} is truncated")
                offset += got

        starts = range(0, info.nbytes, PIECE)
        if len(starts) <= 1:
            [piece(s) for s in starts]
        else:
            list(kernel.pool().map(piece, starts))
    finally:
        os.close(fd)
    return buf


def _stat(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


@dataclass
class Source:
    root: Path
    index: dict[str, Any]
    weight_map: dict[str, str]
    headers: dict[str, dict[str, TensorInfo]]
    metadata: dict[str, dict[str, str]]
    chosen: dict[str, set[str]]  # shard -> the tensors converted in it
    files: list[str] = field(default_factory=list)  # every file the overlay derives from, relative

    @property
    def count(self) -> int:
        return sum(len(names) for names in self.chosen.values())


def _safe_rel(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
        raise OverlayError(f"{where} names the shard {name!r}, which is not a file inside the checkpoint")
    return name


def load_source(source: Path, match: str, expect: int | None) -> Source:
    """The checkpoint as the overlay needs it, every problem refused in one line."""
    if not source.is_dir():
        raise OverlayError(f"{source} is not a checkpoint folder")
    index_path = source / INDEX
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError) as exc:
        raise OverlayError(f"{index_path} is not a readable safetensors index ({exc})") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) for k in weight_map):
        raise OverlayError(f"{index_path} has no weight_map of tensor names to shards; the index is broken")
    try:
        pattern = re.compile(match)
    except re.error as exc:
        raise OverlayError(f"--match {match!r} is not a regular expression ({exc})") from None
    headers: dict[str, dict[str, TensorInfo]] = {}
    metadata: dict[str, dict[str, str]] = {}
    for shard in sorted({_safe_rel(s, str(index_path)) for s in weight_map.values()}):
        path = source / shard
        if not path.is_file():
            raise OverlayError(f"{path}, named by the index, is missing: the checkpoint is incomplete")
        try:
            headers[shard], metadata[shard], _ = read_header(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # SafetensorsError, bad JSON, bad fields
            raise OverlayError(f"{path} is not a whole safetensors file ({exc}): re-download it") from None
    chosen: dict[str, set[str]] = {}
    for name, shard in weight_map.items():
        info = headers[shard].get(name)
        if info is None:
            raise OverlayError(f"the index names {name} in {shard}, which does not hold it: the index is broken")
        if pattern.search(name):
            if info.dtype != "BF16" or len(info.shape) != 2 or any(d % atlas.BLOCK for d in info.shape):
                raise OverlayError(
                    f"{name} in {shard} is {info.dtype} {list(info.shape)}, not a 2-D BF16 matrix "
                    f"with sides multiples of {atlas.BLOCK}"
                )
            chosen.setdefault(shard, set()).add(name)
    result = Source(source, index, weight_map, headers, metadata, chosen)
    if expect is not None and result.count != expect:
        raise OverlayError(
            f"{result.count} tensors match {match!r} in {source}; expected {expect} (check --match and --expect)"
        )
    result.files = sorted(
        str(p.relative_to(source))
        for p in source.rglob("*")
        if p.is_file() and not p.relative_to(source).parts[0].startswith(".sparkplay")
    )
    return result


def manifest_hashes(source: Path) -> dict[str, tuple[str, list[int]]]:
    """rel -> (sha256, [size, mtime_ns, inode] when it was hashed) from the checkpoint's verified manifest.

    Only a manifest whose digest is recomputed here and named by the completion marker counts;
    a file is proven by it only while its size, mtime and inode are still those it was hashed with.
    """
    try:
        manifest = json.loads((source / CKPT_MANIFEST).read_text())
        marker = json.loads((source / CKPT_MARKER).read_text())
        files = manifest["files"]
        digest = hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        if digest != manifest["digest"] or marker["manifest_digest"] != digest:
            return {}
        stats = marker["stat"]
        return {
            e["path"]: (e["sha256"], list(stats[e["path"]]))
            for e in files
            if e.get("type") == "file" and isinstance(e.get("sha256"), str) and e["path"] in stats
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _proven(path: Path, rel: str, proofs: dict[str, tuple[str, list[int]]]) -> str | None:
    """The manifest's sha256 for a file that is still the one it hashed, else None."""
    if rel not in proofs:
        return None
    st = path.stat()
    sha, (size, mtime_ns, inode) = proofs[rel]
    return sha if (st.st_size, st.st_mtime_ns, st.st_ino) == (size, mtime_ns, inode) else None


def source_manifest_digest(source: Path) -> str | None:
    """The digest of the checkpoint's manifest (sparkplay-ckpt), if it has one."""
    try:
        return str(json.loads((source / CKPT_MANIFEST).read_text())["digest"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
