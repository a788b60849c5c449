"""How a BF16 matrix becomes NVFP4 here: the scheme (Atlas's, ModelOpt's), the route (GPU or CPU kernel,
chosen by converting a sample both ways and comparing), and the scales gate and up share.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

import numpy as np

from sparkplay.nvfp4 import atlas, gpu, kernel, modelopt
from sparkplay.nvfp4.safetensors import OutTensor, TensorInfo, read_bytes
from sparkplay.nvfp4.source import (
    OverlayError,
    Source,
)


def _quantise(
    raw: bytes, info: TensorInfo, route: str, scheme: str, shared: dict[str, np.float32], workers: int
) -> tuple[list[OutTensor], float]:
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
