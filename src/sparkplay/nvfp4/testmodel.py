"""Small GLM-like safetensors checkpoints for tests and the lab: a few shards, an MTP layer
with a handful of BF16 experts named as in GLM-5.3-Flash, other tensors of several dtypes.

    python3 -m sparkplay.nvfp4 make-test-checkpoint DEST [--experts 2] [--rows 32] [--cols 64]
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sparkplay.nvfp4.safetensors import OutTensor, write_file

INDEX = "model.safetensors.index.json"
MTP_LAYER = 45


def bf16(a: np.ndarray) -> bytes:
    """float values to BF16 bytes (truncating, which is all a test checkpoint needs)."""
    return (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def expert_name(expert: int, proj: str, layer: int = MTP_LAYER) -> str:
    return f"model.language_model.layers.{layer}.mlp.experts.{expert}.{proj}_proj.weight"


def _shard(path: Path, tensors: list[OutTensor]) -> None:
    write_file(path, iter(tensors), [(t.name, t.dtype, t.shape, len(t.data)) for t in tensors], {"format": "pt"})


def make_checkpoint(dest: Path, experts: int = 2, rows: int = 32, cols: int = 64, seed: int = 0) -> Path:
    """Write the checkpoint into `dest` (created); return it. Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    dest.mkdir(parents=True)
    names = [expert_name(e, p) for e in range(experts) for p in ("gate", "up", "down")]
    half = (len(names) + 1) // 2
    first = [OutTensor("model.embed_tokens.weight", "F32", (4, 4), np.arange(16, dtype="<f4").tobytes())]
    first += [OutTensor(n, "BF16", (rows, cols), bf16(rng.standard_normal((rows, cols)))) for n in names[:half]]
    second = [OutTensor(n, "BF16", (rows, cols), bf16(rng.standard_normal((rows, cols)))) for n in names[half:]]
    second.append(
        OutTensor(f"model.language_model.layers.{MTP_LAYER}.norm.weight", "BF16", (cols,), bf16(np.ones(cols)))
    )
    second.append(OutTensor("model.position_ids", "I64", (8,), np.arange(8, dtype="<i8").tobytes()))
    third = [OutTensor("lm_head.weight", "BF16", (16, 16), bf16(rng.standard_normal((16, 16))))]
    weight_map = {}
    for fname, tensors in (
        ("model-00001-of-00003.safetensors", first),
        ("model-00002-of-00003.safetensors", second),
        ("model-00003-of-00003.safetensors", third),
    ):
        _shard(dest / fname, tensors)
        weight_map.update({t.name: fname for t in tensors})
    (dest / INDEX).write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2))
    (dest / "config.json").write_text(json.dumps({"model_type": "glm_test", "num_experts": experts}) + "\n")
    return dest
