"""A small safetensors checkpoint for the overlay tests (host and lab)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sparkplay.nvfp4 import overlay
from sparkplay.nvfp4.safetensors import OutTensor, write_file

MATCH = r"^layers\.9\.experts\.\d+\.(gate|up|down)_proj\.weight$"


def bf16(a: np.ndarray) -> bytes:
    return (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def shard(path: Path, tensors: list[OutTensor]) -> None:
    write_file(path, iter(tensors), [(t.name, t.dtype, t.shape, len(t.data)) for t in tensors], {"format": "pt"})


def make_source(src: Path) -> Path:
    """A 3-shard BF16 checkpoint with an index: 6 expert matrices (2 experts x gate/up/down)
    in two shards, other tensors beside them, an untouched shard, a config file."""
    rng = np.random.default_rng(0)
    src.mkdir(parents=True)
    experts = {f"layers.9.experts.{e}.{p}_proj.weight": rng.standard_normal((32, 64)) for e in range(2)
               for p in ("gate", "up", "down")}  # fmt: skip
    names = sorted(experts)
    first = [OutTensor("embed.weight", "F32", (4, 4), np.arange(16, dtype="<f4").tobytes())]
    first += [OutTensor(n, "BF16", (32, 64), bf16(experts[n])) for n in names[:4]]
    second = [OutTensor(n, "BF16", (32, 64), bf16(experts[n])) for n in names[4:]]
    second.append(OutTensor("layers.9.norm.weight", "BF16", (64,), bf16(np.ones(64))))
    third = [OutTensor("lm_head.weight", "BF16", (16, 16), bf16(rng.standard_normal((16, 16))))]
    files = {"model-1.safetensors": first, "model-2.safetensors": second, "model-3.safetensors": third}
    weight_map = {}
    for fname, tensors in files.items():
        shard(src / fname, tensors)
        weight_map.update({t.name: fname for t in tensors})
    (src / overlay.INDEX).write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    (src / "config.json").write_text('{"model_type": "test"}\n')
    return src
