"""The ModelOpt/vLLM NVFP4 scheme (scheme name `modelopt`): the layout of sparkplay.nvfp4.atlas
with the loaders' rounding rules.

- scale2 = amax / 2688 (1.0 for an all-zero matrix, or pair); a MoE expert's
  gate and up projections share one scale2, from the larger amax of the two,
  for vLLM and TensorRT-LLM to load them;
- block scale = block_absmax / (6 * scale2); an all-zero block gets 1.0;
  clamped to [2^-9, 448], then cast to E4M3 rounding to nearest, ties to even;
- element q = x / (s * scale2), rounded to the nearest E2M1 value with ties
  to the even code (0.75, 1.75 and 3.5 go up; 0.25, 1.25, 2.5 and 5 go down),
  saturating at 6.
"""

from __future__ import annotations

import numpy as np

from sparkplay.nvfp4 import atlas
from sparkplay.nvfp4.atlas import BLOCK, E4M3_DECODE, F32, U8, QuantError, Quantised

# (upper bound, inclusive?) per code boundary: ties go to the even code
_BOUNDS = [(0.25, True), (0.75, False), (1.25, True), (1.75, False), (2.5, True), (3.5, False), (5.0, True)]


def amax(w: F32) -> np.float32:
    value = np.float32(np.max(np.abs(w))) if w.size else np.float32(0)
    if not np.isfinite(value):
        raise QuantError("the matrix holds a non-finite value")
    return value


def global_scale(amax_value: np.float32) -> np.float32:
    return np.float32(1.0) if amax_value == 0 else np.float32(amax_value / np.float32(2688))


def e4m3_rne(s: F32) -> U8:
    """Positive float32 in [2^-9, 448] to E4M3 codes, round to nearest, ties to even (exact)."""
    s64 = np.asarray(s, dtype=np.float64)
    codes = np.zeros(s64.shape, dtype=np.int64)
    sub = s64 < atlas.E4M3_MIN_NORMAL
    codes[sub] = np.rint(s64[sub] / atlas.E4M3_MIN_SUBNORMAL).astype(np.int64)  # rint: ties to even
    mant, exp = np.frexp(s64[~sub])
    e = exp.astype(np.int64) - 1
    m = np.rint((mant * 2.0 - 1.0) * 8.0).astype(np.int64)
    carry = m == 8
    e[carry] += 1
    m[carry] = 0
    codes[~sub] = np.minimum(((e + 7) << 3) | m, atlas.E4M3_MAX_CODE)
    return codes.astype(np.uint8)


def e2m1_rne(q: F32) -> U8:
    mag = np.abs(q)
    code = np.zeros(q.shape, dtype=np.uint8)
    for bound, inclusive in _BOUNDS:
        code += (mag > bound) if inclusive else (mag >= bound)
    return code


def quantise(w: F32, scale2: np.float32 | None = None) -> Quantised:
    """Quantise [n, k]; pass `scale2` to share a pair's global scale."""
    if w.ndim != 2 or w.shape[0] % BLOCK or w.shape[1] % BLOCK:
        raise QuantError(f"shape {w.shape} is not 2-D with both dimensions multiples of {BLOCK}")
    w = np.ascontiguousarray(w, dtype=np.float32)
    n, k = w.shape
    scale2 = global_scale(amax(w)) if scale2 is None else np.float32(scale2)
    if not (np.isfinite(scale2) and scale2 > 0):
        raise QuantError(f"global scale {scale2} is not finite and positive")
    blocks = w.reshape(n, k // BLOCK, BLOCK)
    block_absmax = np.max(np.abs(blocks), axis=2)
    s = block_absmax / (np.float32(6) * scale2)
    s = np.where(block_absmax == 0, np.float32(1.0), s)
    s = np.clip(s, np.float32(atlas.E4M3_MIN_SUBNORMAL), np.float32(atlas.E4M3_MAX)).astype(np.float32)
    scale_codes = e4m3_rne(s)
    decoded = E4M3_DECODE[scale_codes]
    q = blocks / (decoded * scale2)[:, :, None]
    codes = (e2m1_rne(q) | ((blocks < 0).astype(np.uint8) << 3)).reshape(n, k)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return Quantised(packed, scale_codes, scale2)


def pair_scale(gate: F32, up: F32) -> np.float32:
    """The one global scale a MoE expert's gate and up projections share."""
    return global_scale(max(amax(gate), amax(up)))
