"""An overlay folder's life: whether it is stale against its source, resumable after an interruption,
or moved aside (and older moved-aside overlays of sparkplay's pruned).

A re-run compares sizes and mtimes, hashes only what changed, and rebuilds
when a byte differs; an overlay that cannot be resumed is moved aside under
a unique name, never overwritten.
"""

from __future__ import annotations

import errno
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkplay import __version__
from sparkplay.nvfp4.source import (
    INDEX,
    PARTIAL_DIR,
    RECEIPT,
    OverlayError,
    Source,
    _stat,
    file_sha256,
)
from sparkplay.nvfp4.verify import _payload_problems

RUN_FILE = "run.json"
RECEIPT_FORMAT = 2


def _identity(source: Path, scheme: str, match: str) -> dict[str, Any]:
    return {
        "format": RECEIPT_FORMAT,
        "converter_version": __version__,
        "scheme": scheme,
        "match": match,
        "source": str(source.resolve()),
    }


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
