"""The nodes' GGUF header reader (plugins/module_utils/sparkplay_gguf.py) on a real-sized header and on a hostile
one, against the baseline: the straightforward reader a good engineer writes first (each string's length read
with its own `read`, then a seek past it), measured in the same run on the same files.

The real-sized header holds what llama.cpp writes for a large vocabulary: the architecture, 256k token strings,
250k merges, 256k float scores and the block count. The hostile one holds one array of 2^24 empty strings (a
sparse file: 128 MiB of zero lengths); 2^26 of them fit the reader's 1 GiB bound, so the baseline's time there
is this figure times 4, and the reader's is its time bound (it refuses after MAX_SECONDS). The last line is
JSON.

    python benchmarks/gguf_header.py [--hostile-log2 24]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))
from ansible_collections.sparkplay.spark.plugins.module_utils import sparkplay_gguf as reader


def key(name: str, kind: int) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", kind)


def strings(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<Q", len(t)) + t for t in items)


def real_header(path: Path) -> Path:
    tokens = [f"tok{i}".encode() for i in range(256_000)]
    merges = [f"a{i} b{i}".encode() for i in range(250_000)]
    with path.open("wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 5))
        fh.write(key("general.architecture", 8) + struct.pack("<Q", 5) + b"llama")
        fh.write(key("tokenizer.ggml.tokens", 9) + struct.pack("<IQ", 8, len(tokens)) + strings(tokens))
        fh.write(key("tokenizer.ggml.scores", 9) + struct.pack("<IQ", 6, len(tokens)) + b"\0" * 4 * len(tokens))
        fh.write(key("tokenizer.ggml.merges", 9) + struct.pack("<IQ", 8, len(merges)) + strings(merges))
        fh.write(key("llama.block_count", 4) + struct.pack("<I", 32))
    return path


def hostile_header(path: Path, count: int) -> Path:
    with path.open("wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + key("x", 9) + struct.pack("<IQ", 8, count))
        fh.truncate(fh.tell() + count * 8)
    return path


def baseline(path: Path) -> dict:
    """Every value walked with a read per length (the layout GGUF's spec gives), the block count kept."""
    found: dict = {}

    def unpack(fh: BinaryIO, fmt: str) -> int:
        return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]

    def skip(fh: BinaryIO, kind: int) -> None:
        if kind in reader.SCALARS:
            fh.seek(struct.calcsize(reader.SCALARS[kind]), 1)
        elif kind == reader.STRING:
            fh.seek(unpack(fh, "<Q"), 1)
        else:
            item, count = unpack(fh, "<I"), unpack(fh, "<Q")
            for _ in range(count):
                skip(fh, item)

    with path.open("rb") as fh:
        fh.read(4)
        unpack(fh, "<I")
        unpack(fh, "<Q")
        for _ in range(unpack(fh, "<Q")):
            name = fh.read(unpack(fh, "<Q")).decode()
            kind = unpack(fh, "<I")
            if name.endswith("block_count") and kind == 4:
                found[name] = unpack(fh, "<I")
            else:
                skip(fh, kind)
    return found


def timed(call: object, *args: object) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        call(*args)  # type: ignore[operator]
        outcome = "read"
    except reader.GGUFError as exc:
        outcome = f"refused: {exc}"
    return time.perf_counter() - started, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile-log2", type=int, default=24)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        real = real_header(Path(scratch) / "real.gguf")
        hostile = hostile_header(Path(scratch) / "hostile.gguf", 1 << args.hostile_log2)
        figures = {
            "real_baseline_s": timed(baseline, real)[0],
            "real_reader_s": timed(reader.header_fields, str(real), ("block_count",))[0],
            "hostile_baseline_s": timed(baseline, hostile)[0],
            "hostile_reader_s": timed(reader.header_fields, str(hostile), ("block_count",))[0],
        }
    scale = 1 << (26 - args.hostile_log2)
    print(
        f"real header (256k tokens, 250k merges): baseline {figures['real_baseline_s']:.3f} s, "
        f"reader {figures['real_reader_s']:.3f} s"
    )
    print(
        f"hostile header (2^{args.hostile_log2} empty strings): baseline {figures['hostile_baseline_s']:.2f} s "
        f"(2^26 in the bound: about {figures['hostile_baseline_s'] * scale:.0f} s), reader "
        f"{figures['hostile_reader_s']:.2f} s"
    )
    print(json.dumps({k: round(v, 4) for k, v in figures.items()} | {"hostile_log2": args.hostile_log2}))


if __name__ == "__main__":
    main()
