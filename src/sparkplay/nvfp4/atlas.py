"""The Atlas quantisation scheme, bit for bit (docs/reference: the NVFP4 overlay format).

All arithmetic is float32 and unfused, in the reference's order:

1. scale2 = absmax(W) / (6 * 448), or 1.0 for an all-zero matrix;
2. per 16-element block along k: s = (block_absmax * (1 / scale2)) / 6,
   encoded as E4M3 in software: saturate at 448, below 2^-9 flush to 0,
   mantissa rounded half away from zero, never the NaN code 0x7F;
3. per element: q = x * (1 / (decoded_s * scale2)), encoded as E2M1 by the
   magnitude thresholds 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 (a tie goes to
   the smaller magnitude), bit 3 the sign of any negative x;
4. a block whose scale flushed to 0 encodes magnitude 0 with the sign of x
   (the reference is silent; this project decides).

Packed output: U8 [n, k/2] with element 2j in the low nibble, F8_E4M3 scales
[n, k/16] row-major, and the F32 scalar scale2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

BLOCK = 16
E4M3_MAX = 448.0
E4M3_MAX_CODE = 0x7E
E4M3_MIN_SUBNORMAL = 2.0**-9
E4M3_MIN_NORMAL = 2.0**-6
E2M1_THRESHOLDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]


class QuantError(ValueError):
    """A matrix that cannot be converted; the message says which rule it broke."""


def _e4m3_table() -> F32:
    """Every E4M3 (fn) code decoded; 0x7F/0xFF (NaN) decode to NaN."""
    table = np.zeros(256, dtype=np.float32)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp, mant = (code >> 3) & 0xF, code & 0x7
        if exp == 0xF and mant == 0x7:
            table[code] = np.nan
        elif exp == 0:
            table[code] = sign * mant / 8.0 * 2.0**-6
        else:
            table[code] = sign * (1.0 + mant / 8.0) * 2.0 ** (exp - 7)
    return table


E4M3_DECODE = _e4m3_table()


def e4m3_encode(s: F32) -> U8:
    """Non-negative float32 scales to E4M3 codes by the Atlas rules (vectorised, exact)."""
    s64 = np.asarray(s, dtype=np.float64)  # every float32 is exact in float64
    codes = np.zeros(s64.shape, dtype=np.uint8)
    sub = (s64 >= E4M3_MIN_SUBNORMAL) & (s64 < E4M3_MIN_NORMAL)
    # subnormals count units of 2^-9; a round-up to 8 units is the first normal, code 0x08
    codes[sub] = np.floor(s64[sub] / E4M3_MIN_SUBNORMAL + 0.5).astype(np.uint8)
    normal = (s64 >= E4M3_MIN_NORMAL) & (s64 < E4M3_MAX)
    mant, exp = np.frexp(s64[normal])  # s = mant * 2^exp, mant in [0.5, 1)
    e = exp.astype(np.int64) - 1
    m = np.floor((mant * 2.0 - 1.0) * 8.0 + 0.5).astype(np.int64)  # half away from zero (m >= 0)
    carry = m == 8
    e[carry] += 1
    m[carry] = 0
    code = ((e + 7) << 3) | m
    codes[normal] = np.minimum(code, E4M3_MAX_CODE).astype(np.uint8)
    codes[s64 >= E4M3_MAX] = E4M3_MAX_CODE
    return codes


@dataclass(frozen=True)
class Quantised:
    weight: U8  # [n, k/2]
    weight_scale: U8  # [n, k/16], E4M3 bytes
    weight_scale_2: np.float32


def global_scale(w: F32) -> np.float32:
    absmax = np.float32(np.max(np.abs(w))) if w.size else np.float32(0)
    if not np.isfinite(absmax):
        raise QuantError("the matrix holds a non-finite value")
    if absmax == 0:
        return np.float32(1.0)
    return np.float32(absmax / np.float32(6 * 448))


def quantise(w: F32) -> Quantised:
    """Quantise one float32 matrix [n, k] (k and n multiples of 16): the plain vectorised implementation."""
    if w.ndim != 2 or w.shape[0] % BLOCK or w.shape[1] % BLOCK:
        raise QuantError(f"shape {w.shape} is not 2-D with both dimensions multiples of {BLOCK}")
    w = np.ascontiguousarray(w, dtype=np.float32)
    scale2 = global_scale(w)
    packed, scale_codes = encode(w, scale2)
    return Quantised(packed, scale_codes, scale2)


def encode(w: F32, scale2: np.float32) -> tuple[U8, U8]:
    """Rows of a matrix under a given global scale: (packed codes, E4M3 block scales)."""
    if not (np.isfinite(scale2) and scale2 > 0):
        raise QuantError(f"global scale {scale2} is not finite and positive")
    n, k = w.shape
    blocks = w.reshape(n, k // BLOCK, BLOCK)
    block_absmax = np.max(np.abs(blocks), axis=2)
    with np.errstate(invalid="ignore", over="ignore"):  # a scale2 that underflowed: NaN/inf, encoded as 0/0x7E
        inv_scale2 = np.float32(1.0) / scale2
        s = (block_absmax * inv_scale2) / np.float32(6.0)
    scale_codes = e4m3_encode(s)
    decoded = E4M3_DECODE[scale_codes]
    with np.errstate(divide="ignore", over="ignore"):
        factor = np.float32(1.0) / (decoded * scale2)  # inf where the scale flushed to 0
    factor[decoded == 0] = 0  # rule 4: magnitude 0, sign kept below
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.abs(blocks * factor[:, :, None])
    # the E2M1 magnitude: how many thresholds |q| exceeds (a tie goes to the smaller magnitude)
    magnitude = np.zeros(q.shape, dtype=np.uint8)
    for threshold in E2M1_THRESHOLDS:
        magnitude += q > threshold
    codes = (magnitude | ((blocks < 0).astype(np.uint8) << 3)).reshape(n, k)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    if np.any(scale_codes == 0x7F):
        raise QuantError("a block scale encoded as the NaN code 0x7F")
    return packed, scale_codes


CHUNK_ROWS = 8  # about 1 MiB of float32 temporaries per chunk and thread, whatever the matrix


def quantise_bf16(raw: npt.NDArray[np.uint16], run: Any = None) -> Quantised:
    """The same bytes as quantise(), from BF16 bits, a few rows at a time: memory stays near the input.

    `run(function, items)` maps row chunks (the converter passes a thread pool's map; numpy releases
    the GIL in its loops), else they go one after another.
    """
    if raw.ndim != 2 or raw.shape[0] % BLOCK or raw.shape[1] % BLOCK:
        raise QuantError(f"shape {raw.shape} is not 2-D with both dimensions multiples of {BLOCK}")
    n, k = raw.shape
    run = run or (lambda f, items: [f(i) for i in items])
    spans = [(r, min(n, r + CHUNK_ROWS)) for r in range(0, n, CHUNK_ROWS)]

    def top(span: tuple[int, int]) -> int:
        magnitude = raw[span[0] : span[1]] & np.uint16(0x7FFF)
        if np.any(magnitude >= 0x7F80):
            raise QuantError("the matrix holds a non-finite value")
        return int(magnitude.max()) if magnitude.size else 0

    scale2 = global_scale(bf16_to_f32(np.array([max(run(top, spans), default=0)], dtype=np.uint16)))
    packed = np.empty((n, k // 2), dtype=np.uint8)
    scales = np.empty((n, k // BLOCK), dtype=np.uint8)

    def rows(span: tuple[int, int]) -> None:
        packed[span[0] : span[1]], scales[span[0] : span[1]] = encode(bf16_to_f32(raw[span[0] : span[1]]), scale2)

    run(rows, spans)
    return Quantised(packed, scales, scale2)


def dequantise(qt: Quantised) -> F32:
    """The float32 matrix the packed form stands for."""
    low = qt.weight & 0x0F
    high = qt.weight >> 4
    n = qt.weight.shape[0]
    codes = np.empty((n, qt.weight.shape[1] * 2), dtype=np.uint8)
    codes[:, 0::2], codes[:, 1::2] = low, high
    values = E2M1_VALUES[codes & 0x7] * np.where(codes & 0x8, np.float32(-1), np.float32(1))
    scales = E4M3_DECODE[qt.weight_scale] * qt.weight_scale_2
    return (values.reshape(n, -1, BLOCK) * scales[:, :, None]).reshape(n, -1).astype(np.float32)


def bf16_to_f32(raw: npt.NDArray[np.uint16]) -> F32:
    """BF16 bit patterns to float32 (exact: BF16 is the top half of a float32)."""
    return (raw.astype(np.uint32) << 16).view(np.float32)
