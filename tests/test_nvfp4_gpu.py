"""The GPU path gives the CPU path's bytes. Needs PyTorch and a CUDA device: it runs on the
lent GPU machine (benchmarks/nvfp4.py runs it there) and is skipped elsewhere, CI included."""

from __future__ import annotations

import numpy as np
import pytest

from sparkplay.nvfp4 import atlas, gpu

pytestmark = pytest.mark.skipif(not gpu.available(), reason="needs PyTorch with a CUDA device")


@pytest.mark.parametrize("seed", range(4))
def test_gpu_bytes_equal_cpu_bytes(seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((256, 1024)).astype(np.float32)
    w[0, :16] = 0
    w[1, 3] = 1e4  # an outlier: tiny scales, flushes
    w[2] *= 1e-7
    cpu, dev = atlas.quantise(w), gpu.quantise(w)
    assert dev.weight_scale_2 == cpu.weight_scale_2
    assert np.array_equal(dev.weight_scale, cpu.weight_scale)
    assert np.array_equal(dev.weight, cpu.weight)
