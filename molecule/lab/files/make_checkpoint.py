#!/usr/bin/env python3
"""Make a checkpoint-like tree for the lab: large shards, small files, nested folders,
and a Hugging Face cache-style symlink into blobs/ named by sha256. Idempotent.

    make_checkpoint.py DEST [--large 2] [--large-mb 70] [--small 20] [--small-kb 64]
"""

import argparse
import hashlib
import os
import sys
from pathlib import Path


def write(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        left = size
        while left:
            chunk = os.urandom(min(left, 8 << 20))
            fh.write(chunk)
            left -= len(chunk)
    tmp.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dest", type=Path)
    parser.add_argument("--large", type=int, default=2)
    parser.add_argument("--large-mb", type=int, default=70)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--small-kb", type=int, default=64)
    args = parser.parse_args()
    dest = args.dest
    for i in range(args.large):
        # the first shard is over the 64 MiB line, the others half as big
        size = args.large_mb << 20 if i == 0 else (args.large_mb << 20) // 2
        write(dest / f"model-{i + 1:05d}-of-{args.large:05d}.safetensors", size)
    for i in range(args.small):
        write(dest / "extra" / f"part{i // 10}" / f"file{i:03d}.bin", args.small_kb << 10)
    config = b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 128}\n'
    (dest / "config.json").write_bytes(config)
    sha = hashlib.sha256(config).hexdigest()
    (dest / "blobs").mkdir(exist_ok=True)
    (dest / "blobs" / sha).write_bytes(config)
    link = dest / "snapshots" / "main" / "config.json"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(f"../../blobs/{sha}")
    total = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"{dest}: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
