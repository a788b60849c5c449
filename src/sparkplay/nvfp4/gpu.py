"""The Atlas scheme on a CUDA GPU with PyTorch: the same bytes as sparkplay.nvfp4.atlas.

Used when torch and a CUDA device are present (the converter falls back to
the numpy path otherwise). Every step is one elementwise float32 kernel in
the reference's order, so nothing is fused into a multiply-add, and the E4M3
encoding runs in float64, where every float32 is exact; the tests compare
the bytes with the CPU path on the GPU machine.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from sparkplay.nvfp4 import atlas


def available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def quantise(w: Any) -> atlas.Quantised:
    """Quantise a float32 matrix (a numpy array or a CUDA tensor) on the GPU."""
    import torch

    w = torch.as_tensor(w, device=torch.device("cuda"), dtype=torch.float32)
    if w.ndim != 2 or w.shape[0] % atlas.BLOCK or w.shape[1] % atlas.BLOCK:
        raise atlas.QuantError(f"shape {tuple(w.shape)} is not 2-D with both dimensions multiples of {atlas.BLOCK}")
    packed, codes, scale2 = _quantise_on_device(w)
    return atlas.Quantised(packed.cpu().numpy(), codes.cpu().numpy(), np.float32(scale2.item()))


def _quantise_on_device(w: Any) -> tuple[Any, Any, Any]:
    """(packed uint8, E4M3 uint8 codes, scale2) of a float32 CUDA matrix, left on the device."""
    import torch

    dev = w.device
    n, k = w.shape
    absmax = w.abs().max()
    if not torch.isfinite(absmax):
        raise atlas.QuantError("the matrix holds a non-finite value")
    one = torch.ones((), dtype=torch.float32, device=dev)
    scale2 = one if absmax == 0 else absmax / torch.tensor(6 * 448, dtype=torch.float32, device=dev)
    if not scale2 > 0:
        raise atlas.QuantError(f"global scale {scale2.item()} is not finite and positive")
    blocks = w.view(n, k // atlas.BLOCK, atlas.BLOCK)
    block_absmax = blocks.abs().amax(dim=2)
    s = (block_absmax * (one / scale2)) / torch.tensor(6.0, dtype=torch.float32, device=dev)
    codes = _e4m3_encode(s.double())
    table = torch.as_tensor(atlas.E4M3_DECODE, device=dev)
    decoded = table[codes.long()]
    factor = one / (decoded * scale2)
    factor = torch.where(decoded == 0, torch.zeros_like(factor), factor)
    q = (blocks * factor.unsqueeze(2)).abs()
    magnitude = torch.zeros(q.shape, dtype=torch.uint8, device=dev)
    for threshold in atlas.E2M1_THRESHOLDS.tolist():
        magnitude += q > threshold
    element = (magnitude | ((blocks < 0).to(torch.uint8) << 3)).view(n, k)
    packed = element[:, 0::2] | (element[:, 1::2] << 4)
    return packed, codes.to(torch.uint8), scale2


_STREAMS = threading.local()


def quantise_bf16(bits: np.ndarray) -> atlas.Quantised:
    """Quantise a BF16 matrix given as its bit patterns: the BF16 bytes go to the device as they are (half
    float32's bytes), on this thread's own stream, so several tensors' copies and kernels overlap; they are
    widened to float32 on the device, exactly. The copy is from pageable memory: on the H200 host a staged
    pinned copy measured no faster (8.0 against 8.0 GB/s, docs/benchmarks.md) and pinned buffers would stay
    cached in the process, so memory would no longer follow the tensors in flight."""
    import torch

    if bits.ndim != 2 or bits.shape[0] % atlas.BLOCK or bits.shape[1] % atlas.BLOCK:
        raise atlas.QuantError(f"shape {bits.shape} is not 2-D with both dimensions multiples of {atlas.BLOCK}")
    stream = getattr(_STREAMS, "stream", None)
    if stream is None:
        stream = _STREAMS.stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        device_bits = torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).to("cuda")
        wide = (device_bits.to(torch.int32) << 16).view(torch.float32)  # BF16 is the top half of a float32
        packed, codes, scale2 = _quantise_on_device(wide)
        del device_bits, wide
        result = atlas.Quantised(packed.cpu().numpy(), codes.cpu().numpy(), np.float32(scale2.item()))
    return result


def _e4m3_encode(s: Any) -> Any:
    import torch

    codes = torch.zeros(s.shape, dtype=torch.int64, device=s.device)
    sub = (s >= atlas.E4M3_MIN_SUBNORMAL) & (s < atlas.E4M3_MIN_NORMAL)
    codes = torch.where(sub, torch.floor(s / atlas.E4M3_MIN_SUBNORMAL + 0.5).long(), codes)
    mant, exp = torch.frexp(s)
    e = exp.long() - 1
    m = torch.floor((mant * 2.0 - 1.0) * 8.0 + 0.5).long()
    carry = m == 8
    e = torch.where(carry, e + 1, e)
    m = torch.where(carry, torch.zeros_like(m), m)
    normal_code = torch.clamp(((e + 7) << 3) | m, max=atlas.E4M3_MAX_CODE)
    normal = (s >= atlas.E4M3_MIN_NORMAL) & (s < atlas.E4M3_MAX)
    codes = torch.where(normal, normal_code, codes)
    return torch.where(s >= atlas.E4M3_MAX, torch.full_like(codes, atlas.E4M3_MAX_CODE), codes)
