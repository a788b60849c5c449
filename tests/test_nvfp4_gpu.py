"""The GPU path gives the CPU path's bytes. Needs PyTorch and a CUDA device: it runs on the
lent GPU machine (benchmarks/nvfp4.py runs it there) and is skipped elsewhere, CI included."""

from __future__ import annotations

import numpy as np
import pytest

from sparkplay.nvfp4 import atlas, gpu, kernel, overlay
from tests.nvfp4_fixture import MATCH, make_source

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


def to_bf16(w: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(w, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("top", [1.0, 1e-36, 3e-39])
def test_bf16_upload_path_equals_cpu_bytes_including_an_underflowing_scale(top):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((128, 512)) * top).astype(np.float32)
    w[4, :16] = 0
    raw = to_bf16(w)
    with np.errstate(all="ignore"):
        cpu = atlas.quantise(atlas.bf16_to_f32(raw))
    dev = gpu.quantise_bf16(raw)
    assert dev.weight_scale_2 == cpu.weight_scale_2
    assert np.array_equal(dev.weight_scale, cpu.weight_scale) and np.array_equal(dev.weight, cpu.weight)


def test_the_gpu_route_writes_the_cpu_routes_bytes_and_auto_records_its_measurement(tmp_path):
    source = make_source(tmp_path / "ckpt")
    on_gpu = overlay.convert(source, tmp_path / "gpu", match=MATCH, expect=6, device="gpu")
    on_cpu = overlay.convert(source, tmp_path / "cpu", match=MATCH, expect=6, device="cpu")
    assert on_gpu.route == "gpu" and on_cpu.route in ("cpu-kernel", "cpu-numpy")
    for shard in sorted(p.name for p in (tmp_path / "gpu").glob("*.safetensors")):
        assert (tmp_path / "gpu" / shard).read_bytes() == (tmp_path / "cpu" / shard).read_bytes(), shard
    chosen = overlay.convert(source, tmp_path / "auto", match=MATCH, expect=6, device="auto")
    receipt = __import__("json").loads((tmp_path / "auto" / overlay.RECEIPT).read_text())
    if kernel.available():
        assert set(receipt["route_measured"]["measured_mbps"]) == {"gpu", "cpu-kernel"}
    assert chosen.route == receipt["route"]
