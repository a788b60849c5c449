"""Verifying an overlay: every converted payload, shard and link recomputed from the bytes on disk.

What the receipt records is the claim; what this module reads back from the
files is the proof (docs/overlay.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkplay.nvfp4.safetensors import TensorInfo, read_header
from sparkplay.nvfp4.source import (
    INDEX,
    PARTIAL_DIR,
    RECEIPT,
    _proven,
    _sha,
    file_sha256,
    manifest_hashes,
    read_tensor,
    tensor_digest,
)


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
