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
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sparkplay import __version__
from sparkplay.fsutil import atomic_write
from sparkplay.nvfp4 import atlas, gpu, kernel, modelopt
from sparkplay.nvfp4.safetensors import OutTensor, SafetensorsError, TensorInfo, header_bytes, read_bytes, read_header

INDEX = "model.safetensors.index.json"
RECEIPT = "sparkplay-overlay.json"
PARTIAL_DIR = ".sparkplay-overlay-partial"
RUN_FILE = "run.json"
RECEIPT_FORMAT = 2
DEFAULT_MATCH = r"^model\.language_model\.layers\.45\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$"
DEFAULT_EXPECT = 864
DEFAULT_KEEP_MOVED = 1
HASH_CHUNK = 1 << 20  # small: a hashing thread's buffer is memory the converter holds
CKPT_MANIFEST = ".sparkplay/manifest.json"  # sparkplay-ckpt's, verified on this rank (docs/checkpoints.md)
CKPT_MARKER = ".sparkplay/complete.json"


class OverlayError(ValueError):
    """A one-line reason the overlay cannot be made or is not valid; nothing was written."""


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


def _sha(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


PIECE = 4 << 20
TENSOR_DIGEST = "sha256 of the sha256 digests of its 4 MiB pieces"


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


def _stat(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


# -- the source, read and checked before anything is written ---------------------------------


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


# -- quantising, on the route this host is fastest on ---------------------------------------


def _quantise(raw: bytes, info: TensorInfo, route: str, scheme: str, shared: dict[str, np.float32],
              workers: int) -> tuple[list[OutTensor], float]:  # fmt: skip
    prefix = info.name.removesuffix(".weight")
    bits = np.frombuffer(raw, dtype="<u2").reshape(info.shape)
    try:
        if scheme == "modelopt":
            qt = modelopt.quantise(atlas.bf16_to_f32(bits), shared.get(info.name))
        elif route == "gpu":
            qt = gpu.quantise_bf16(bits)
        elif route == "cpu-kernel":
            qt = kernel.quantise_bf16(bits, workers)
        else:
            qt = atlas.quantise_bf16(bits, lambda f, items: list(kernel.pool().map(f, items)))
    except atlas.QuantError as exc:
        raise OverlayError(f"{info.name}: {exc}") from None
    n, k = info.shape
    outs = [
        (f"{prefix}.weight", "U8", (n, k // 2), memoryview(qt.weight).cast("B")),
        (f"{prefix}.weight_scale", "F8_E4M3", (n, k // 16), memoryview(qt.weight_scale).cast("B")),
        (f"{prefix}.weight_scale_2", "F32", (), np.float32(qt.weight_scale_2).tobytes()),
    ]
    return [OutTensor(name, dtype, shape, data) for name, dtype, shape, data in outs], float(qt.weight_scale_2)


def choose_route(scheme: str, device: str, sample: TensorInfo | None, read: Callable[[], bytes]) -> tuple[str, dict]:
    """The route, and on `auto` with both a GPU and the kernel, the rates that chose it (measured here)."""
    if device not in ("auto", "cpu", "gpu"):
        raise OverlayError(f"device {device!r} is not auto, cpu or gpu")
    has_gpu = scheme == "atlas" and device in ("auto", "gpu") and gpu.available()
    if device == "gpu" and not has_gpu:
        raise OverlayError("--device gpu needs scheme atlas and PyTorch with a CUDA device")
    cpu_route = "cpu-kernel" if scheme == "atlas" and kernel.available() else "cpu-numpy"
    if device == "gpu" or (has_gpu and cpu_route != "cpu-kernel"):
        return "gpu", {}
    if not has_gpu or sample is None:
        return cpu_route, {}
    bits = np.frombuffer(read(), dtype="<u2").reshape(sample.shape)
    rates: dict[str, float] = {}
    for route, run in (
        ("gpu", gpu.quantise_bf16),
        ("cpu-kernel", lambda b: kernel.quantise_bf16(b, os.cpu_count() or 1)),
    ):
        run(bits)  # warm: kernels compiled, pools made
        started = time.perf_counter()
        for _ in range(3):
            run(bits)
        rates[route] = round(3 * len(bits.data) / 1e6 / (time.perf_counter() - started), 1)
    return max(rates, key=lambda r: rates[r]), {"measured_mbps": rates, "sample": sample.name}


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


def _rewrite_shard(src: Path, dst: Path, tensors: dict[str, TensorInfo], metadata: dict[str, str],
                   chosen: set[str], workers: int, route: str, scheme: str,
                   shared: dict[str, np.float32]) -> dict[str, Any]:  # fmt: skip
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


PAIR = re.compile(r"(gate|up)_proj")


def _shared_scales(src: Source) -> dict[str, np.float32]:
    """modelopt: one global scale per expert's gate/up pair (the larger amax); others their own."""
    amaxes: dict[str, np.float32] = {}
    for shard, names in src.chosen.items():
        for name in names:
            info = src.headers[shard][name]
            bits = np.frombuffer(read_bytes(src.root / shard, info), dtype="<u2").reshape(info.shape)
            amaxes[name] = modelopt.amax(atlas.bf16_to_f32(bits))
    groups: dict[str, list[str]] = {}
    for name in amaxes:
        key = PAIR.sub("gate_up", name) if PAIR.search(name) else name
        groups.setdefault(key, []).append(name)
    return {
        name: modelopt.global_scale(max(amaxes[n] for n in members)) for members in groups.values() for name in members
    }


# -- is the overlay there still this source's? ----------------------------------------------


def _identity(source: Path, scheme: str, match: str) -> dict[str, Any]:
    return {"format": RECEIPT_FORMAT, "converter_version": __version__, "scheme": scheme, "match": match,
            "source": str(source.resolve())}  # fmt: skip


def _source_changed(src: Source, recorded: dict[str, Any]) -> str | None:
    """Why the source is not the bytes the overlay was made from (None: it is). Sizes and mtimes first;
    only a file whose size or mtime moved is hashed again."""
    if set(recorded) != set(src.files):
        added, gone = sorted(set(src.files) - set(recorded)), sorted(set(recorded) - set(src.files))
        return f"files were added to or removed from the source ({', '.join((added + gone)[:3])})"
    for rel in src.files:
        st, want = (src.root / rel).stat(), recorded[rel]
        if (st.st_size, st.st_mtime_ns, st.st_ino) == (want["size"], want["mtime_ns"], want.get("inode")):
            continue  # the same file, untouched since it was hashed (a replaced file is a new inode)
        if st.st_size != want["size"] or file_sha256(src.root / rel) != want["sha256"]:
            return f"{rel} changed in the source since the overlay was made"
    return None


def _output_changed(output: Path, receipt: dict[str, Any]) -> str | None:
    """A quick look at the overlay's own files: the index by hash, shards by size and mtime (re-hashed
    only when those moved), links by presence and size. `verify` is the full check."""
    if (output / PARTIAL_DIR).exists():
        return "partial receipts are still there"
    try:
        if file_sha256(output / INDEX) != receipt["index_sha256"]:
            return "the overlay's index was edited"
        for shard, st in receipt["outputs"].items():
            now = (output / shard).stat()
            if (now.st_size, now.st_mtime_ns) != (st["size"], st["mtime_ns"]) and _payload_problems(
                output, shard, receipt["shards"][shard]
            ):
                return f"{shard} in the overlay changed"
        for rel, want in receipt["links"].items():
            if (output / rel).stat().st_size != want["size"]:
                return f"{rel} in the overlay changed"
    except (OSError, KeyError, ValueError, TypeError):
        return "the overlay's files are not the ones its receipt lists"
    return None


def stale(output: Path, src: Source, scheme: str, match: str) -> str | None:
    """None when the overlay at `output` is complete and made from exactly this source; else why not."""
    try:
        receipt = json.loads((output / RECEIPT).read_text())
    except (OSError, ValueError):
        return "it has no completion receipt"
    if not isinstance(receipt, dict) or receipt.get("complete") is not True:
        return "its receipt does not say complete"
    ident = _identity(src.root, scheme, match)
    differs = [k for k, v in ident.items() if receipt.get(k) != v]
    if differs:
        return f"it was made with another {differs[0].replace('_', ' ')}"
    if not isinstance(receipt.get("sources"), dict):
        return "its receipt lists no source files"
    return _source_changed(src, receipt["sources"]) or _output_changed(output, receipt)


# -- moving aside, resuming, pruning --------------------------------------------------------


def _sparkplays(folder: Path) -> bool:
    return (folder / RECEIPT).exists() or (folder / PARTIAL_DIR).is_dir()


def move_aside(output: Path) -> Path:
    """`output` renamed beside itself under a name no other run can take (time to the microsecond, then
    a counter)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    for n in range(1000):
        target = output.with_name(f"{output.name}.old-{stamp}" + (f"-{n}" if n else ""))
        if target.exists() or target.is_symlink():
            continue
        try:
            output.rename(target)
        except OSError as exc:  # taken meanwhile by another run
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            raise
        return target
    raise OverlayError(f"could not move {output} aside: too many folders named like it")


def prune_moved(output: Path, keep: int) -> tuple[list[Path], list[Path]]:
    """Older moved-aside overlays beyond the newest `keep`: sparkplay's removed, others kept (returned)."""
    aside = sorted(output.parent.glob(f"{output.name}.old-*"), reverse=True)
    removed, kept = [], []
    for folder in aside[max(keep, 0) :]:
        if folder.is_dir() and not folder.is_symlink() and _sparkplays(folder):
            shutil.rmtree(folder)
            removed.append(folder)
        else:
            kept.append(folder)
    return removed, kept


def _partial_key(shard: str) -> str:
    return shard.replace("/", "%2F") + ".json"


def _resumable(output: Path, ident: dict[str, Any]) -> bool:
    try:
        return json.loads((output / PARTIAL_DIR / RUN_FILE).read_text()) == ident and not (output / RECEIPT).exists()
    except (OSError, ValueError):
        return False


def _reusable(output: Path, src: Source, shard: str) -> dict[str, Any] | None:
    """A finished shard of an interrupted run whose source and output are as they were then."""
    try:
        partial = json.loads((output / PARTIAL_DIR / _partial_key(shard)).read_text())
        same_source = _stat(src.root / shard) == partial["source_stat"]
        same_output = _stat(output / shard) == partial["output_stat"]
    except (OSError, ValueError, KeyError):
        return None
    return partial if same_source and same_output and set(partial["converted"]) == src.chosen[shard] else None


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
    route, measured = choose_route(scheme, device, sample,
                                   lambda: read_bytes(src.root / sample_shard, sample))  # fmt: skip
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
            partial = _rewrite_shard(source / shard, output / shard, src.headers[shard], src.metadata[shard],
                                     src.chosen[shard], workers, route, scheme, shared)  # fmt: skip
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
    new_index = {"metadata": {**src.index.get("metadata", {}), "total_size": total},
                 "weight_map": dict(sorted(new_map.items()))}  # fmt: skip
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
    return Result(output, action, src.count, moved, time.monotonic() - started, route, reason, tuple(removed),
                  tuple(kept))  # fmt: skip


def _done(value: str) -> concurrent.futures.Future[str]:
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    future.set_result(value)
    return future


# -- verify ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    problems: list[str]
    links_hashed: int = 0
    links_proven: int = 0  # by the checkpoint's verified manifest, the file unchanged since it hashed it


def _payload_problems(output: Path, shard: str, tensors: dict[str, Any]) -> list[str]:
    problems = []
    header = read_header(output / shard)[0]
    if set(header) != set(tensors):
        problems.append(f"{shard}: tensors differ from the receipt")
    for name, want in tensors.items():
        info = header.get(name)
        if info is None:
            continue
        data = read_tensor(output / shard, info)
        if len(data) != want.get("size") or tensor_digest(data) != want.get("digest"):
            problems.append(f"{shard}: {name} does not match its receipt hash")
    return problems


def verify(output: Path, expect: int | None = None) -> list[str]:
    """Every problem found re-reading the overlay (empty means verified)."""
    return verify_report(output, expect).problems


def verify_report(output: Path, expect: int | None = None) -> Report:
    """Re-read the overlay against its receipt: the index by hash, every payload, every linked file in
    full (or proven by the source checkpoint's verified manifest), the index against the shards."""
    try:
        receipt = json.loads((output / RECEIPT).read_text())
        if not isinstance(receipt, dict):
            raise ValueError("not an object")
    except (OSError, ValueError):
        return Report([f"{output / RECEIPT} is missing or unreadable: the overlay is not complete"])
    problems: list[str] = []
    if receipt.get("complete") is not True:
        problems.append("the receipt does not say complete")
    if expect is not None and receipt.get("converted_count") != expect:
        problems.append(f"{receipt.get('converted_count')} matrices converted, expected {expect}")
    if (output / PARTIAL_DIR).exists():
        problems.append("partial receipts are still there: a conversion did not finish")
    headers: dict[str, dict[str, TensorInfo] | None] = {}

    def header_of(shard: str) -> dict[str, TensorInfo] | None:
        if shard not in headers:
            try:
                headers[shard] = read_header(output / shard)[0]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                headers[shard] = None
                problems.append(f"{shard}: {exc}")
        return headers[shard]

    shards = receipt.get("shards") if isinstance(receipt.get("shards"), dict) else {}
    for shard, tensors in shards.items():
        if header_of(shard) is not None:
            problems += _payload_problems(output, shard, tensors)
    for name in receipt.get("converted") or {}:
        # the NVFP4 payload keeps the name P.weight, as U8; a BF16 one there is the superseded matrix
        shard = next((s for s, tensors in shards.items() if name in tensors), None)
        if shard is None:
            problems.append(f"{name}: no shard holds its NVFP4 form")
            continue
        info = (header_of(shard) or {}).get(name)
        if info is not None and info.dtype == "BF16":
            problems.append(f"{name}: the superseded BF16 tensor is still in {shard}")
    source = Path(str(receipt.get("source") or ""))
    proofs = manifest_hashes(source) if receipt.get("source") else {}
    hashed = proven = 0
    for rel, want in (receipt.get("links") or {}).items():
        path = output / rel
        if not path.exists():
            problems.append(f"{rel}: linked file missing")
            continue
        if path.stat().st_size != want.get("size"):
            problems.append(f"{rel}: linked file changed since the overlay was made")
            continue
        sha = _proven(path, rel, proofs)
        if sha is not None:
            proven += 1
        else:
            sha = file_sha256(path)
            hashed += 1
        if sha != want.get("sha256"):
            problems.append(f"{rel}: linked file changed since the overlay was made")
    try:
        index_bytes = (output / INDEX).read_bytes()
        index = json.loads(index_bytes)
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Report([*problems, f"{output / INDEX} is missing or unreadable ({exc})"], hashed, proven)
    if _sha(index_bytes) != receipt.get("index_sha256"):
        problems.append(f"{INDEX} was edited since the overlay was made (its sha256 differs from the receipt's)")
    seen: dict[str, str] = {}
    for shard in sorted({str(s) for s in weight_map.values()}):
        header = header_of(shard)
        if header is None:
            continue
        for name in header:
            if name in seen:
                problems.append(f"{name} appears in both {seen[name]} and {shard}")
            seen[name] = shard
    if seen != weight_map:
        missing = set(weight_map) ^ set(seen)
        problems.append(f"the index and the shard headers disagree ({len(missing)} names differ)")
    return Report(problems, hashed, proven)


__all__ = ["OverlayError", "Result", "SafetensorsError", "convert", "load_source", "stale", "verify"]
