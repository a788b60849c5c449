"""The Atlas NVFP4 scheme against independent scalar references and the error figures in the reference."""

from __future__ import annotations

import numpy as np
import pytest

from sparkplay.nvfp4 import atlas

f32 = np.float32


def e4m3_brute(s: float) -> int:
    """Nearest finite E4M3 code by scanning every code; ties away from zero; the Atlas edges."""
    if s >= 448:
        return 0x7E
    if s < 2**-9:
        return 0
    best, best_err = 0, float("inf")
    for code in range(0x7F):  # 0x7F is NaN
        value = float(atlas.E4M3_DECODE[code])
        err = abs(value - s)
        if err < best_err or (err == best_err and value > float(atlas.E4M3_DECODE[best])):
            best, best_err = code, err
    return best


def quantise_scalar(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """Element by element, float32 scalars, the reference's order: a second implementation."""
    n, k = w.shape
    absmax = f32(0)
    for x in w.flat:
        absmax = max(absmax, f32(abs(x)))
    scale2 = f32(1.0) if absmax == 0 else f32(absmax / f32(2688))
    codes = np.zeros((n, k), dtype=np.uint8)
    scales = np.zeros((n, k // 16), dtype=np.uint8)
    for r in range(n):
        for b in range(k // 16):
            block = w[r, b * 16 : (b + 1) * 16]
            bmax = f32(0)
            for x in block:
                bmax = max(bmax, f32(abs(x)))
            s = f32(f32(bmax * f32(f32(1) / scale2)) / f32(6))
            scales[r, b] = e4m3_brute(float(s))
            decoded = atlas.E4M3_DECODE[scales[r, b]]
            for j, x in enumerate(block):
                sign = 8 if x < 0 else 0
                if decoded == 0:
                    codes[r, b * 16 + j] = sign
                    continue
                q = f32(x * f32(f32(1) / f32(decoded * scale2)))
                mag = sum(1 for t in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0) if abs(float(q)) > t)
                codes[r, b * 16 + j] = mag | sign
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, scales, scale2


@pytest.mark.parametrize(
    "value",
    [
        0.0,
        2**-10,
        2**-9 * 0.999,
        2**-9,
        2**-9 * 1.5,
        2**-9 * 2.5,
        2**-6 * 0.99,
        2**-6,
        1.0,
        1.0625,
        1.1875,
        3.3,
        100.0,
        416.0,
        431.999,
        432.0,
        440.0,
        447.99,
        448.0,
        1e6,
    ],
)
def test_e4m3_encode_matches_a_brute_force_search(value):
    assert int(atlas.e4m3_encode(np.array([value], dtype=np.float32))[0]) == e4m3_brute(float(f32(value)))


def test_e4m3_encode_matches_brute_force_on_many_values():
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.uniform(0, 500, 2000), 2.0 ** rng.uniform(-11, 9, 2000)]).astype(np.float32)
    fast = atlas.e4m3_encode(values)
    assert all(int(c) == e4m3_brute(float(v)) for c, v in zip(fast, values, strict=True))
    assert not np.any(fast == 0x7F)


def _matrices():
    rng = np.random.default_rng(1)
    gauss = rng.standard_normal((32, 64)).astype(np.float32)
    outlier = gauss.copy()
    outlier[3, 5] = 900.0  # one huge value: most blocks' scales become tiny
    tiny = (rng.standard_normal((16, 32)) * 1e-6).astype(np.float32)
    tiny[0, :16] = 0.0
    ties = np.tile(np.array([0.25, -0.75, 1.25, 1.75, 2.5, -3.5, 5.0, 6.0], dtype=np.float32), (16, 4))
    return {"gauss": gauss, "outlier": outlier, "tiny": tiny, "ties": ties, "zero": np.zeros((16, 16), np.float32)}


@pytest.mark.parametrize("name", list(_matrices()))
def test_vectorised_equals_scalar_reference(name):
    w = _matrices()[name]
    fast = atlas.quantise(w)
    packed, scales, scale2 = quantise_scalar(w)
    assert fast.weight_scale_2 == scale2
    assert np.array_equal(fast.weight_scale, scales)
    assert np.array_equal(fast.weight, packed)


def test_layout_and_determinism():
    w = np.arange(32 * 16, dtype=np.float32).reshape(32, 16) - 200
    qt = atlas.quantise(w)
    assert qt.weight.shape == (32, 8) and qt.weight.dtype == np.uint8
    assert qt.weight_scale.shape == (32, 1) and qt.weight_scale_2.dtype == np.float32
    again = atlas.quantise(w.copy())
    assert np.array_equal(qt.weight, again.weight) and np.array_equal(qt.weight_scale, again.weight_scale)
    # element 2j is the low nibble: the first element of row 0 (-200, the row's biggest) is code 0xF
    assert qt.weight[0, 0] & 0x0F == 0xF


@pytest.mark.parametrize("dist", ["gauss", "laplace", "student"])
def test_relative_error_matches_the_reference_figure(dist):
    rng = np.random.default_rng(3)
    shape = (256, 512)
    w = {
        "gauss": rng.standard_normal(shape),
        "laplace": rng.laplace(size=shape),
        "student": rng.standard_t(5, size=shape),
    }[dist].astype(np.float32)
    deq = atlas.dequantise(atlas.quantise(w))
    err = np.linalg.norm(deq - w) / np.linalg.norm(w)
    assert 0.08 < err < 0.10, err


def test_bug_signatures_are_far_from_the_right_answer():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 128)).astype(np.float32)
    qt = atlas.quantise(w)
    swapped = atlas.Quantised(
        ((qt.weight >> 4) | (qt.weight << 4)).astype(np.uint8), qt.weight_scale, qt.weight_scale_2
    )
    err = np.linalg.norm(atlas.dequantise(swapped) - w) / np.linalg.norm(w)
    assert err > 1.0


def test_bad_matrices_are_refused():
    with pytest.raises(atlas.QuantError, match="multiples of 16"):
        atlas.quantise(np.zeros((16, 24), np.float32))
    bad = np.zeros((16, 16), np.float32)
    bad[0, 0] = np.inf
    with pytest.raises(atlas.QuantError, match="non-finite"):
        atlas.quantise(bad)


def test_bf16_bits_to_float32():
    raw = np.array([0x3F80, 0xBF80, 0x4040, 0x0000, 0x8000], dtype=np.uint16)
    assert atlas.bf16_to_f32(raw).tolist() == [1.0, -1.0, 3.0, 0.0, -0.0]
