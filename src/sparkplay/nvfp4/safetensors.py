"""safetensors files, read and written without the safetensors package.

Layout: an 8-byte little-endian header length, the JSON header (names to
dtype, shape, data_offsets relative to the data area, plus optional
__metadata__), then the data. The header is padded with spaces to a multiple
of 8 bytes so the data area stays aligned.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


class SafetensorsError(ValueError):
    pass


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str], int]:
    """Tensors (in file order), metadata, and where the data area starts."""
    with path.open("rb") as fh:
        raw_len = fh.read(8)
        if len(raw_len) != 8:
            raise SafetensorsError(f"{path}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", raw_len)
        if length > 100 << 20:
            raise SafetensorsError(f"{path}: header of {length} bytes is implausible")
        header = json.loads(fh.read(length))
    base = 8 + length
    size = path.stat().st_size
    metadata = header.pop("__metadata__", {}) or {}
    tensors: dict[str, TensorInfo] = {}
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        dtype, shape = info["dtype"], tuple(info["shape"])
        expected = DTYPE_SIZES.get(dtype, 0) * _count(shape)
        if dtype not in DTYPE_SIZES or end - begin != expected or base + end > size:
            raise SafetensorsError(f"{path}: tensor {name} ({dtype} {shape}) does not fit its offsets")
        tensors[name] = TensorInfo(name, dtype, shape, base + begin, base + end)
    return tensors, metadata, base


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def read_bytes(path: Path, info: TensorInfo) -> bytes:
    with path.open("rb", buffering=0) as fh:
        fh.seek(info.start)
        data = fh.read(info.nbytes)
    if len(data) != info.nbytes:
        raise SafetensorsError(f"{path}: tensor {info.name} is truncated")
    return data


@dataclass(frozen=True)
class OutTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes | memoryview


def header_bytes(tensors: list[tuple[str, str, tuple[int, ...], int]], metadata: dict[str, str]) -> bytes:
    """The padded header for tensors given as (name, dtype, shape, nbytes), in data order."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, nbytes in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body


def write_file(
    path: Path,
    tensors: Iterator[OutTensor],
    plan: list[tuple[str, str, tuple[int, ...], int]],
    metadata: dict[str, str],
) -> dict[str, tuple[str, int]]:
    """Write tensors (in `plan` order) to `path`, fsync it; return name -> (sha256, size) of each payload."""
    digests: dict[str, tuple[str, int]] = {}
    with path.open("wb") as fh:
        fh.write(header_bytes(plan, metadata))
        for (name, _, _, nbytes), tensor in zip(plan, tensors, strict=True):
            if tensor.name != name or len(tensor.data) != nbytes:
                raise SafetensorsError(f"{path}: tensor {tensor.name} does not match the planned {name}")
            fh.write(tensor.data)
            digests[name] = (hashlib.sha256(tensor.data).hexdigest(), nbytes)
        _sync(fh)
    return digests


def _sync(fh: IO[bytes]) -> None:
    fh.flush()
    os.fsync(fh.fileno())
