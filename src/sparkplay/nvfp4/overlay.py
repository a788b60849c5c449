"""The MTP -> NVFP4 overlay: a checkpoint folder in which the chosen BF16 matrices are NVFP4.

Shards holding a converted tensor are rewritten (every other tensor
byte-exact, in its order); every other file is hardlinked (an absolute
symlink where a hardlink is refused, recorded); the index is rewritten.

The overlay is bound to the source bytes it came from: the receipt records
every source file's size, mtime and sha256 (hashed here, or proven by the
checkpoint's own verified manifest where the file is still the one it
hashed). A re-run compares sizes and mtimes, hashes only what changed, and
rebuilds when a byte differs. Every bad source (missing or truncated shard,
broken index, a tensor named but absent, wrong dtype or shape) is refused in
one line before anything is written. A partial receipt per finished shard
lets an interrupted run resume; an overlay that cannot be resumed is moved
aside under a unique name, and older moved-aside overlays beyond a count are
removed when they are sparkplay's (kept and reported when not).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import errno
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparkplay.fsutil import atomic_write
from sparkplay.nvfp4 import kernel
from sparkplay.nvfp4.outputs import (
    RUN_FILE,
    _identity,
    _partial_key,
    _resumable,
    _reusable,
    move_aside,
    prune_moved,
    stale,
)
from sparkplay.nvfp4.routes import _quantise, _shared_scales, choose_route
from sparkplay.nvfp4.safetensors import OutTensor, SafetensorsError, TensorInfo, header_bytes, read_bytes, read_header
from sparkplay.nvfp4.source import (
    INDEX,
    PARTIAL_DIR,
    PIECE,
    RECEIPT,
    OverlayError,
    _proven,
    _stat,
    file_sha256,
    load_source,
    manifest_hashes,
    read_tensor,
    source_manifest_digest,
    tensor_digest,
)
from sparkplay.nvfp4.verify import Report, verify, verify_report

DEFAULT_MATCH = r"^model\.language_model\.layers\.45\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$"
DEFAULT_EXPECT = 864
DEFAULT_KEEP_MOVED = 1


@dataclass(frozen=True)
class Result:
    output: Path
    action: str  # "converted", "resumed", "already complete"
    converted: int
    moved_aside: Path | None
    seconds: float
    route: str = ""
    reason: str | None = None  # why an existing overlay was not used as it was
    removed: tuple[Path, ...] = ()  # older moved-aside overlays of sparkplay's, removed
    kept: tuple[Path, ...] = ()  # moved-aside folders that are not sparkplay's: kept, for the user to remove


TENSOR_DIGEST = "sha256 of the sha256 digests of its 4 MiB pieces"


def _write_at(fd: int, data: Any, offset: int) -> None:
    """`data` at `offset`, in 4 MiB pieces in parallel (page-cache copies scale with the cores)."""
    view = memoryview(data).cast("B")

    def piece(start: int) -> None:
        chunk, done = view[start : start + PIECE], 0
        while done < len(chunk):
            done += os.pwrite(fd, chunk[done:], offset + start + done)

    starts = range(0, len(view), PIECE)
    if len(starts) <= 1:
        [piece(s) for s in starts]
    else:
        list(kernel.pool().map(piece, starts))


# -- the source, read and checked before anything is written ---------------------------------


# -- quantising, on the route this host is fastest on ---------------------------------------


# -- one shard rewritten: read, quantise, hash and write overlapped ---------------------------


def _plan(tensors: dict[str, TensorInfo], chosen: set[str]) -> list[tuple[str, str, tuple[int, ...], int]]:
    plan = []
    for name, info in tensors.items():
        if name in chosen:
            prefix = name.removesuffix(".weight")
            n, k = info.shape
            plan += [
                (f"{prefix}.weight", "U8", (n, k // 2), n * k // 2),
                (f"{prefix}.weight_scale", "F8_E4M3", (n, k // 16), n * k // 16),
                (f"{prefix}.weight_scale_2", "F32", (), 4),
            ]
        else:
            plan.append((name, info.dtype, info.shape, info.nbytes))
    return plan


def _rewrite_shard(
    src: Path,
    dst: Path,
    tensors: dict[str, TensorInfo],
    metadata: dict[str, str],
    chosen: set[str],
    workers: int,
    route: str,
    scheme: str,
    shared: dict[str, np.float32],
) -> dict[str, Any]:
    """Write `dst`: the header first, then every tensor at its planned offset by whichever thread made it.

    Tensors are read, quantised, hashed and written in parallel, each step itself spread over the cores,
    within a byte budget of twice the shard's largest tensor: a tensor counts its source bytes until
    quantised, then its output's (9/16 of them) until written, so peak memory stays under 3x the largest
    tensor. The file is fsynced once, at the end."""
    plan = _plan(tensors, chosen)
    head = header_bytes(plan, metadata)
    offsets: dict[str, int] = {}
    sizes: dict[str, int] = {}
    position = len(head)
    for name, _, _, nbytes in plan:
        offsets[name], sizes[name] = position, nbytes
        position += nbytes
    record: dict[str, Any] = {"tensors": {}, "converted": {}}
    infos = list(tensors.values())
    budget = 2 * max((i.nbytes for i in infos), default=1)
    room = threading.Condition()
    held = [0]
    charged: dict[str, int] = {}

    def charge(name: str, nbytes: int) -> None:
        with room:
            held[0] += nbytes - charged.get(name, 0)
            charged[name] = nbytes
            room.notify_all()

    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)

    def produce(info: TensorInfo) -> tuple[dict[str, tuple[str, int]], dict[str, Any] | None]:
        try:
            raw = read_tensor(src, info)
            converted = None
            if info.name in chosen:  # its source bytes are bound by the shard's own sha256 in the receipt
                outs, scale2 = _quantise(raw, info, route, scheme, shared, workers)
                del raw
                charge(info.name, sum(len(o.data) for o in outs))
                converted = {"scale2": scale2, "source_size": info.nbytes}
            else:
                outs = [OutTensor(info.name, info.dtype, info.shape, memoryview(raw))]
            digests = {}
            for out in outs:
                if len(out.data) != sizes[out.name]:
                    raise SafetensorsError(f"{dst}: tensor {out.name} does not match its planned size")
                digests[out.name] = (tensor_digest(out.data), len(out.data))
                _write_at(fd, out.data, offsets[out.name])
            return digests, converted
        finally:
            charge(info.name, 0)

    # at most a few tensors at once (the budget allows two of the largest); each spreads over the cores
    producers = concurrent.futures.ThreadPoolExecutor(max_workers=3, thread_name_prefix="shard")
    futures: list[concurrent.futures.Future] = []
    try:
        os.ftruncate(fd, position)
        _write_at(fd, head, 0)
        for info in infos:
            with room:
                while held[0] and held[0] + info.nbytes > budget:
                    room.wait()
                held[0] += info.nbytes
                charged[info.name] = info.nbytes
            futures.append(producers.submit(produce, info))
        for info, future in zip(infos, futures, strict=True):
            digests, converted = future.result()
            for name, (digest, size) in digests.items():
                record["tensors"][name] = {"digest": digest, "size": size}
            if converted is not None:
                record["converted"][info.name] = converted
        os.fsync(fd)
    finally:
        producers.shutdown(wait=True, cancel_futures=True)
        os.close(fd)
    record["tensors"] = {name: record["tensors"][name] for name, *_ in plan}  # in file order
    return record


def _link(src: Path, dst: Path) -> str:
    try:
        os.link(src, dst)
        return "hardlink"
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.EACCES):
            raise
    dst.symlink_to(src.resolve())  # the engine then needs the source at the same absolute path
    return "symlink"


# -- is the overlay there still this source's? ----------------------------------------------


# -- moving aside, resuming, pruning --------------------------------------------------------


# -- convert ---------------------------------------------------------------------------------


def _fixed_mmap_threshold() -> None:
    """Large buffers straight from and back to the kernel (glibc): by default glibc raises its mmap
    threshold after the first large free, and every later tensor-sized buffer then stays in a heap arena
    of whichever thread made it, so the process keeps the high-water mark of every thread at once."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: 1 MiB, fixed
    except (OSError, AttributeError):
        pass  # not glibc: its allocator decides


def convert(
    source: Path,
    output: Path,
    *,
    scheme: str = "atlas",
    match: str = DEFAULT_MATCH,
    expect: int | None = DEFAULT_EXPECT,
    workers: int | None = None,
    device: str = "auto",
    keep_moved: int = DEFAULT_KEEP_MOVED,
) -> Result:
    """Build the overlay of `source` at `output` (see the module's docstring)."""
    started = time.monotonic()
    if scheme not in ("atlas", "modelopt"):
        raise OverlayError(f"scheme {scheme!r} is not known; use atlas or modelopt")
    _fixed_mmap_threshold()
    src = load_source(source, match, expect)
    if output.resolve() == source.resolve() or source.resolve() in output.resolve().parents:
        raise OverlayError(f"the overlay {output} would be inside its source {source}; choose another folder")
    workers = workers or max(1, os.cpu_count() or 1)
    if device not in ("auto", "cpu", "gpu"):
        raise OverlayError(f"device {device!r} is not auto, cpu or gpu")
    reason: str | None = None
    if output.exists() or output.is_symlink():
        reason = stale(output, src, scheme, match)
        if reason is None:
            return Result(output, "already complete", src.count, None, time.monotonic() - started)
    sample_shard = min(src.chosen, default="")
    sample = src.headers[sample_shard][min(src.chosen[sample_shard])] if sample_shard else None
    route, measured = choose_route(scheme, device, sample, lambda: read_bytes(src.root / sample_shard, sample))
    ident = _identity(source, scheme, match)
    resuming = output.is_dir() and not output.is_symlink() and _resumable(output, ident)
    moved: Path | None = None
    if not resuming and (output.exists() or output.is_symlink()):
        moved = move_aside(output)
    if not resuming:
        output.mkdir(parents=True)
        (output / PARTIAL_DIR).mkdir()
        atomic_write(output / PARTIAL_DIR / RUN_FILE, json.dumps(ident, sort_keys=True) + "\n")

    # every source file's sha256 binds the receipt to these bytes: proven by the checkpoint's verified
    # manifest where the file is unchanged since it hashed it, else hashed here beside the conversion
    # (its own threads: hashlib releases the GIL, and the quantising pool is never queued behind a file)
    proofs = manifest_hashes(source)
    stats = {rel: _stat(source / rel) for rel in src.files}
    hashing = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, workers // 2), thread_name_prefix="sha")
    hashes: dict[str, tuple[str, concurrent.futures.Future[str]]] = {}
    for rel in src.files:
        sha = _proven(source / rel, rel, proofs)
        hashes[rel] = ("manifest", _done(sha)) if sha else ("hashed", hashing.submit(file_sha256, source / rel))

    shared = _shared_scales(src) if scheme == "modelopt" else {}
    records: dict[str, dict[str, Any]] = {}
    reused = 0
    for shard in sorted(src.chosen):
        partial = _reusable(output, src, shard) if resuming else None
        if partial is None:
            (output / shard).parent.mkdir(parents=True, exist_ok=True)
            partial = _rewrite_shard(
                source / shard,
                output / shard,
                src.headers[shard],
                src.metadata[shard],
                src.chosen[shard],
                workers,
                route,
                scheme,
                shared,
            )
            partial |= {"source_stat": _stat(source / shard), "output_stat": _stat(output / shard)}
            atomic_write(output / PARTIAL_DIR / _partial_key(shard), json.dumps(partial, sort_keys=True) + "\n")
        else:
            reused += 1
        records[shard] = partial
    links: dict[str, Any] = {}
    for rel in src.files:
        if rel in src.chosen or rel == INDEX:
            continue
        target = output / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():  # a resumed run links again: the source may have moved on
            target.unlink()
        links[rel] = {"kind": _link(source / rel, target), "size": stats[rel]["size"]}
    new_map = {name: shard for name, shard in src.weight_map.items() if shard not in src.chosen}
    for shard, record in records.items():
        new_map.update(dict.fromkeys(record["tensors"], shard))
    total = sum(
        info.nbytes for shard in sorted(set(new_map.values())) for info in read_header(output / shard)[0].values()
    )
    new_index = {
        "metadata": {**src.index.get("metadata", {}), "total_size": total},
        "weight_map": dict(sorted(new_map.items())),
    }
    atomic_write(output / INDEX, json.dumps(new_index, indent=2) + "\n")
    sources = {rel: {**stats[rel], "sha256": fut.result(), "proof": proof} for rel, (proof, fut) in hashes.items()}
    hashing.shutdown()
    for rel, link in links.items():
        link["sha256"] = sources[rel]["sha256"]
    if any(_stat(source / rel)["mtime_ns"] != stats[rel]["mtime_ns"] for rel in src.files):
        raise OverlayError(f"{source} changed while the overlay was made; run again once nothing writes it")
    receipt = {
        **ident,
        "complete": True,
        "source_manifest": source_manifest_digest(source),
        "converted_count": src.count,
        "device": "gpu" if route == "gpu" else "cpu",
        "route": route,
        "route_measured": measured,
        "converted": {n: c for r in records.values() for n, c in r["converted"].items()},
        "tensor_digest": TENSOR_DIGEST,
        "shards": {shard: r["tensors"] for shard, r in records.items()},
        "outputs": {shard: {k: v for k, v in _stat(output / shard).items() if k != "inode"} for shard in records},
        "sources": sources,
        "links": links,
        "total_size": total,
        "index_sha256": file_sha256(output / INDEX),
    }
    # the completion receipt is the last thing written; the partials go only after it
    atomic_write(output / RECEIPT, json.dumps(receipt, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(output / PARTIAL_DIR)
    removed, kept = prune_moved(output, keep_moved)
    action = "resumed" if reused else "converted"
    return Result(
        output, action, src.count, moved, time.monotonic() - started, route, reason, tuple(removed), tuple(kept)
    )


def _done(value: str) -> concurrent.futures.Future[str]:
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    future.set_result(value)
    return future


# -- verify ----------------------------------------------------------------------------------


# the overlay's API, whichever module of the package holds each part
__all__ = [
    "INDEX",
    "PARTIAL_DIR",
    "RECEIPT",
    "OverlayError",
    "Report",
    "Result",
    "SafetensorsError",
    "convert",
    "load_source",
    "stale",
    "verify",
    "verify_report",
]
