"""The MTP -> NVFP4 overlay: a checkpoint folder in which the chosen BF16 matrices are NVFP4.

Shards holding a converted tensor are rewritten (every other tensor
byte-exact, in its order); every other file is hardlinked (an absolute
symlink where a hardlink is refused, recorded); the index is rewritten. A
partial receipt is written per shard while working and one completion
receipt at the end, only after everything was written and fsynced. An
existing overlay that is not complete for this converter, scheme and source
is moved aside, never deleted.
"""

from __future__ import annotations

import concurrent.futures
import errno
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparkplay import __version__
from sparkplay.fsutil import atomic_write
from sparkplay.nvfp4 import atlas, gpu, kernel, modelopt
from sparkplay.nvfp4.safetensors import OutTensor, TensorInfo, read_bytes, read_header, write_file

INDEX = "model.safetensors.index.json"
RECEIPT = "sparkplay-overlay.json"
PARTIAL_DIR = ".sparkplay-overlay-partial"
DEFAULT_MATCH = r"^model\.language_model\.layers\.45\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$"
DEFAULT_EXPECT = 864
SAMPLE = 4 << 20  # linked files are checked by size and the sha256 of their first and last 4 MiB


class OverlayError(ValueError):
    """A one-line reason the overlay cannot be made or is not valid."""


@dataclass(frozen=True)
class Result:
    output: Path
    action: str  # "converted", "already complete"
    converted: int
    moved_aside: Path | None
    seconds: float


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sampled_hash(path: Path) -> str:
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        digest.update(fh.read(SAMPLE))
        if size > SAMPLE:
            fh.seek(max(SAMPLE, size - SAMPLE))
            digest.update(fh.read(SAMPLE))
    return digest.hexdigest()


PAIR = re.compile(r"(gate|up)_proj")


def _bf16_matrix(raw: bytes, info: TensorInfo) -> np.ndarray:
    return atlas.bf16_to_f32(np.frombuffer(raw, dtype="<u2").reshape(info.shape))


def _quantise(
    raw: bytes, info: TensorInfo, route: str, scheme: str, shared: dict[str, np.float32], workers: int
) -> tuple[list[OutTensor], float]:
    prefix = info.name.removesuffix(".weight")
    try:
        if route == "cpu-kernel":
            qt = kernel.quantise_bf16(np.frombuffer(raw, dtype="<u2").reshape(info.shape), workers)
        elif scheme == "modelopt":
            qt = modelopt.quantise(_bf16_matrix(raw, info), shared.get(info.name))
        else:
            w = _bf16_matrix(raw, info)
            qt = gpu.quantise(w) if route == "gpu" else atlas.quantise(w)
    except atlas.QuantError as exc:
        raise OverlayError(f"{info.name}: {exc}") from None
    n, k = info.shape
    return [
        OutTensor(f"{prefix}.weight", "U8", (n, k // 2), qt.weight.tobytes()),
        OutTensor(f"{prefix}.weight_scale", "F8_E4M3", (n, k // 16), qt.weight_scale.tobytes()),
        OutTensor(f"{prefix}.weight_scale_2", "F32", (), np.float32(qt.weight_scale_2).tobytes()),
    ], float(qt.weight_scale_2)


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
    src: Path, dst: Path, chosen: set[str], workers: int, route: str, scheme: str, shared: dict[str, np.float32]
) -> dict[str, Any]:
    tensors, metadata, _ = read_header(src)
    plan = _plan(tensors, chosen)
    record: dict[str, Any] = {"tensors": {}, "converted": {}}
    sources: dict[str, tuple[str, int]] = {}

    def produce(info: TensorInfo) -> tuple[list[OutTensor], float | None]:
        raw = read_bytes(src, info)
        sources[info.name] = (_sha(raw), len(raw))
        if info.name in chosen:
            # the kernel spreads one tensor over every core itself
            return _quantise(raw, info, route, scheme, shared, workers if route == "cpu-kernel" else 1)
        return [OutTensor(info.name, info.dtype, info.shape, raw)], None

    def stream() -> Iterator[OutTensor]:
        # a bounded window of tensors in flight, written in order: memory stays small. With the
        # kernel (every core on one tensor) tensors go one at a time: memory stays near one tensor.
        ahead = 1 if route == "cpu-kernel" else workers * 2
        with concurrent.futures.ThreadPoolExecutor(max_workers=ahead) as pool:
            infos = list(tensors.values())
            window = [pool.submit(produce, info) for info in infos[:ahead]]
            for i, _ in enumerate(infos):
                outs, scale2 = window[i].result()
                window[i] = None  # type: ignore[call-overload]
                if i + ahead < len(infos):
                    window.append(pool.submit(produce, infos[i + ahead]))
                if scale2 is not None:
                    record["converted"][infos[i].name] = {"scale2": scale2}
                yield from outs

    digests = write_file(dst, stream(), plan, metadata)
    for name, (sha, size) in digests.items():
        record["tensors"][name] = {"sha256": sha, "size": size}
    for name, (sha, size) in sources.items():
        if name in record["converted"]:
            record["converted"][name].update({"source_sha256": sha, "source_size": size})
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


def _shared_scales(
    source: Path, headers: dict[str, dict[str, TensorInfo]], chosen_by_shard: dict[str, set[str]]
) -> dict[str, np.float32]:
    """modelopt: one global scale per expert's gate/up pair (the larger amax); others their own."""
    amaxes: dict[str, np.float32] = {}
    for shard, names in chosen_by_shard.items():
        for name in names:
            info = headers[shard][name]
            amaxes[name] = modelopt.amax(_bf16_matrix(read_bytes(source / shard, info), info))
    groups: dict[str, list[str]] = {}
    for name in amaxes:
        key = PAIR.sub("gate_up", name) if PAIR.search(name) else name
        groups.setdefault(key, []).append(name)
    return {
        name: modelopt.global_scale(max(amaxes[n] for n in members)) for members in groups.values() for name in members
    }


def source_manifest_digest(source: Path) -> str | None:
    """The digest of the checkpoint's verified manifest (sparkplay-ckpt), if it has one."""
    try:
        return str(json.loads((source / ".sparkplay" / "manifest.json").read_text())["digest"])
    except (OSError, ValueError, KeyError):
        return None


def _receipt_matches(output: Path, source: Path, scheme: str) -> bool:
    """Complete for this converter, scheme, source and source manifest, and it still verifies."""
    try:
        receipt = json.loads((output / RECEIPT).read_text())
    except (OSError, ValueError):
        return False
    return (
        receipt.get("complete") is True
        and receipt.get("converter_version") == __version__
        and receipt.get("scheme") == scheme
        and receipt.get("source") == str(source.resolve())
        and receipt.get("source_manifest") == source_manifest_digest(source)
        and not verify(output)
    )


def convert(
    source: Path,
    output: Path,
    *,
    scheme: str = "atlas",
    match: str = DEFAULT_MATCH,
    expect: int | None = DEFAULT_EXPECT,
    workers: int | None = None,
    device: str = "auto",
) -> Result:
    """Build the overlay of `source` at `output`."""
    started = time.monotonic()
    if scheme not in ("atlas", "modelopt"):
        raise OverlayError(f"scheme {scheme!r} is not known; use atlas or modelopt")
    index_path = source / INDEX
    try:
        index = json.loads(index_path.read_text())
        weight_map: dict[str, str] = index["weight_map"]
    except (OSError, ValueError, KeyError) as exc:
        raise OverlayError(f"{index_path} is not a readable safetensors index ({exc})") from None
    pattern = re.compile(match)
    chosen_by_shard: dict[str, set[str]] = {}
    for name, shard in weight_map.items():
        if pattern.search(name):
            chosen_by_shard.setdefault(shard, set()).add(name)
    count = sum(len(names) for names in chosen_by_shard.values())
    if expect is not None and count != expect:
        raise OverlayError(
            f"{count} tensors match {match!r} in {source}; expected {expect} (check --match and --expect)"
        )
    headers = {shard: read_header(source / shard)[0] for shard in chosen_by_shard}
    for shard, names in chosen_by_shard.items():
        for name in names:
            info = headers[shard].get(name)
            if info is None or info.dtype != "BF16" or len(info.shape) != 2:
                what = "missing" if info is None else f"{info.dtype} {list(info.shape)}"
                raise OverlayError(f"{name} in {shard} is {what}, not a 2-D BF16 matrix")
    if output.exists() and _receipt_matches(output, source, scheme):
        return Result(output, "already complete", count, None, time.monotonic() - started)
    moved: Path | None = None
    if output.exists() or output.is_symlink():
        moved = output.with_name(f"{output.name}.old-{time.strftime('%Y%m%dT%H%M%S')}")
        output.rename(moved)
    output.mkdir(parents=True)
    (output / PARTIAL_DIR).mkdir()
    workers = workers or max(1, os.cpu_count() or 1)
    if device not in ("auto", "cpu", "gpu"):
        raise OverlayError(f"device {device!r} is not auto, cpu or gpu")
    use_gpu = scheme == "atlas" and (device == "gpu" or (device == "auto" and gpu.available()))
    if device == "gpu" and not use_gpu:
        raise OverlayError("--device gpu needs scheme atlas and PyTorch with a CUDA device")
    route = "gpu" if use_gpu else "cpu-kernel" if scheme == "atlas" and kernel.available() else "cpu-numpy"
    shared = _shared_scales(source, headers, chosen_by_shard) if scheme == "modelopt" else {}
    tensors_record: dict[str, Any] = {}
    converted: dict[str, Any] = {}
    for shard, names in sorted(chosen_by_shard.items()):
        record = _rewrite_shard(source / shard, output / shard, names, workers, route, scheme, shared)
        atomic_write(output / PARTIAL_DIR / f"{shard}.json", json.dumps(record, sort_keys=True) + "\n")
        tensors_record[shard] = record["tensors"]
        converted.update(record["converted"])
    links: dict[str, Any] = {}
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = path.relative_to(source)
        if str(rel) in chosen_by_shard or rel.name == INDEX or rel.parts[0].startswith(".sparkplay"):
            continue
        target = output / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        kind = _link(path, target)
        links[str(rel)] = {"kind": kind, "size": path.stat().st_size, "sampled_sha256": sampled_hash(path)}
    new_map: dict[str, str] = {}
    for name, shard in weight_map.items():
        if shard not in chosen_by_shard:
            new_map[name] = shard
    for shard, names in tensors_record.items():
        for name in names:
            new_map[name] = shard
    total = sum(
        info.nbytes for shard in sorted(set(new_map.values())) for info in read_header(output / shard)[0].values()
    )
    new_index = {
        "metadata": {**index.get("metadata", {}), "total_size": total},
        "weight_map": dict(sorted(new_map.items())),
    }
    atomic_write(output / INDEX, json.dumps(new_index, indent=2) + "\n")
    receipt = {
        "complete": True,
        "converter_version": __version__,
        "scheme": scheme,
        "source": str(source.resolve()),
        "source_manifest": source_manifest_digest(source),
        "match": match,
        "converted_count": count,
        "device": "gpu" if use_gpu else "cpu",
        "route": route,
        "converted": converted,
        "shards": tensors_record,
        "links": links,
        "total_size": total,
        "index_sha256": _sha((output / INDEX).read_bytes()),
    }
    # the completion receipt is the last thing written; the partials go only after it
    atomic_write(output / RECEIPT, json.dumps(receipt, indent=1, sort_keys=True) + "\n")
    for partial in (output / PARTIAL_DIR).iterdir():
        partial.unlink()
    (output / PARTIAL_DIR).rmdir()
    return Result(output, "converted", count, moved, time.monotonic() - started)


def verify(output: Path, expect: int | None = None) -> list[str]:
    """Every problem found re-reading the overlay (empty means verified)."""
    try:
        receipt = json.loads((output / RECEIPT).read_text())
    except (OSError, ValueError):
        return [f"{output / RECEIPT} is missing or unreadable: the overlay is not complete"]
    problems: list[str] = []
    cache: dict[str, dict[str, TensorInfo] | None] = {}

    def header_of(shard: str) -> dict[str, TensorInfo] | None:
        """A shard's tensors, read once; an unreadable shard is reported once."""
        if shard not in cache:
            try:
                cache[shard] = read_header(output / shard)[0]
            except (OSError, ValueError) as exc:
                cache[shard] = None
                problems.append(f"{shard}: {exc}")
        return cache[shard]

    if receipt.get("complete") is not True:
        problems.append("the receipt does not say complete")
    if expect is not None and receipt.get("converted_count") != expect:
        problems.append(f"{receipt.get('converted_count')} matrices converted, expected {expect}")
    if (output / PARTIAL_DIR).exists():
        problems.append("partial receipts are still there: a conversion did not finish")
    for shard, tensors in receipt.get("shards", {}).items():
        header = header_of(shard)
        if header is None:
            continue
        if set(header) != set(tensors):
            problems.append(f"{shard}: tensors differ from the receipt")
        for name, want in tensors.items():
            info = header.get(name)
            if info is None:
                continue
            data = read_bytes(output / shard, info)
            if len(data) != want["size"] or _sha(data) != want["sha256"]:
                problems.append(f"{shard}: {name} does not match its receipt hash")
    for name in receipt.get("converted", {}):
        # the NVFP4 payload keeps the name P.weight, as U8; a BF16 one there is the superseded matrix
        shard = next((s for s, tensors in receipt.get("shards", {}).items() if name in tensors), None)
        if shard is None:
            problems.append(f"{name}: no shard holds its NVFP4 form")
            continue
        info = (header_of(shard) or {}).get(name)
        if info is not None and info.dtype == "BF16":
            problems.append(f"{name}: the superseded BF16 tensor is still in {shard}")
    for rel, want in receipt.get("links", {}).items():
        path = output / rel
        if not path.exists():
            problems.append(f"{rel}: linked file missing")
        elif path.stat().st_size != want["size"] or sampled_hash(path) != want["sampled_sha256"]:
            problems.append(f"{rel}: linked file changed since the overlay was made")
    try:
        index = json.loads((output / INDEX).read_text())
    except (OSError, ValueError):
        return [*problems, f"{output / INDEX} is missing or unreadable"]
    seen: dict[str, str] = {}
    for shard in sorted(set(index["weight_map"].values())):
        header = header_of(shard)
        if header is None:
            continue
        for name in header:
            if name in seen:
                problems.append(f"{name} appears in both {seen[name]} and {shard}")
            seen[name] = shard
    if seen != index["weight_map"]:
        missing = set(index["weight_map"]) ^ set(seen)
        problems.append(f"the index and the shard headers disagree ({len(missing)} names differ)")
    return problems
