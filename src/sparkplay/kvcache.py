"""llama.cpp's KV cache per token of context, from a GGUF header: what admission claims for a llama.cpp rank
beside its weights (sparkplay.admission), read on the nodes by plugins/module_utils/sparkplay_gguf.py and
cross-checked here with llama.cpp's own reader."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkplay.errors import BadInput

HEADER_KEYS = (
    "block_count",
    "attention.head_count",
    "attention.head_count_kv",
    "embedding_length",
    "attention.key_length",
    "attention.value_length",
)


def kv_bytes_per_token(header: Mapping[str, Any], cache_bytes: int = 2, where: str = "the GGUF model") -> int:
    """llama.cpp's KV cache bytes per token of context (an f16 cache: 2 bytes an element) from a GGUF header's
    fields ({"general.architecture": ARCH, "ARCH.block_count": N, ...}): every layer keeps a key and a value of
    head size for each KV head."""
    arch = header.get("general.architecture")

    def field(key: str) -> int | None:
        value = header.get(f"{arch}.{key}")
        return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    layers, heads, width = field("block_count"), field("attention.head_count"), field("embedding_length")
    if not (arch and layers and heads and width):
        raise BadInput(f"{where}: its GGUF header lacks the layer or head counts", "use a llama.cpp GGUF file")
    kv_heads = field("attention.head_count_kv") or heads
    key = field("attention.key_length") or width // heads
    value = field("attention.value_length") or width // heads
    return layers * kv_heads * (key + value) * cache_bytes


def kv_per_token(gguf_file: Path, cache_bytes: int = 2) -> int:
    """kv_bytes_per_token of a GGUF file read with llama.cpp's own reader (the controller's cross-check of the
    nodes' header reader, plugins/module_utils/sparkplay_gguf.py)."""
    from gguf import GGUFReader  # only the header is read (the file is mapped)

    reader = GGUFReader(str(gguf_file))
    header: dict[str, Any] = {}
    for key, found in reader.fields.items():
        if key == "general.architecture" or key.endswith(HEADER_KEYS):
            value = found.parts[found.data[0]]
            header[key] = bytes(value).decode() if found.types[0].name == "STRING" else int(value[0])
    return kv_bytes_per_token(header, cache_bytes, str(gguf_file))
