"""The ModelOpt/vLLM scheme: rounding rules, zero blocks, the shared pair scale, error figure."""

from __future__ import annotations

import numpy as np
import pytest

from sparkplay.nvfp4 import atlas, modelopt

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1_reference(q: float) -> int:
    """Nearest grid value; on a tie the even code; saturate at 6."""
    m = min(abs(q), 6.0)
    best = min(range(8), key=lambda c: (abs(GRID[c] - m), c % 2))
    return best | (8 if q < 0 else 0)


@pytest.mark.parametrize("q", [0.25, -0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, 7.0, 0.3, -2.9, 0.0])
def test_e2m1_ties_to_even(q):
    code = int(modelopt.e2m1_rne(np.array([q], np.float32))[0]) | (8 if q < 0 else 0)
    assert code == e2m1_reference(q)


def test_e4m3_rne_against_nearest_even_search():
    rng = np.random.default_rng(2)
    values = np.concatenate([2.0 ** rng.uniform(-9, 8.8, 3000), [2**-9, 448.0, 1.0625, 1.1875, 2**-8 * 1.5]])
    values = values.astype(np.float32)
    codes = modelopt.e4m3_rne(values)
    for v, c in zip(values, codes, strict=True):
        candidates = [(abs(float(atlas.E4M3_DECODE[x]) - float(v)), x % 2, x) for x in range(0x7F)]
        assert int(c) == min(candidates)[2], float(v)


def test_zero_blocks_get_scale_one_and_zero_matrix_scale2_one():
    w = np.zeros((16, 32), np.float32)
    w[0, 16:] = 1.0
    qt = modelopt.quantise(w)
    assert atlas.E4M3_DECODE[qt.weight_scale[1, 0]] == 1.0  # an all-zero block
    assert modelopt.quantise(np.zeros((16, 16), np.float32)).weight_scale_2 == 1.0


def test_gate_and_up_share_the_larger_scale():
    rng = np.random.default_rng(5)
    gate = rng.standard_normal((32, 64)).astype(np.float32)
    up = (rng.standard_normal((32, 64)) * 3).astype(np.float32)
    shared = modelopt.pair_scale(gate, up)
    assert shared == np.float32(np.abs(up).max() / np.float32(2688))
    assert modelopt.quantise(gate, shared).weight_scale_2 == modelopt.quantise(up, shared).weight_scale_2 == shared


def test_relative_error_and_determinism():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    qt = modelopt.quantise(w)
    err = np.linalg.norm(atlas.dequantise(qt) - w) / np.linalg.norm(w)
    assert 0.08 < err < 0.10, err
    assert np.array_equal(modelopt.quantise(w).weight, qt.weight)
