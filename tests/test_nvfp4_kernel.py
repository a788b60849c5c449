"""The compiled CPU kernel gives the same bytes as the numpy code and the scalar reference.

The kernel reads BF16 bit patterns, so every matrix here is made BF16 first
(as the checkpoints are). Needs a C compiler; the machines CI runs on have one.
"""

from __future__ import annotations

import concurrent.futures
import json
import os

import numpy as np
import pytest

from sparkplay.nvfp4 import atlas, kernel, overlay
from tests.nvfp4_fixture import MATCH, make_source
from tests.test_nvfp4_atlas import _matrices, quantise_scalar

pytestmark = pytest.mark.skipif(not kernel.available(), reason="no C compiler to build the NVFP4 kernel")


def to_bf16(w: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(w, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def wide_range(rng: np.random.Generator) -> np.ndarray:
    """Rows whose magnitudes sweep 1e-12..1e4: E4M3 subnormals, flushed blocks, saturation at 448."""
    rows = [rng.standard_normal(256) * 10.0 ** rng.uniform(-12, 4) for _ in range(64)]
    w = np.array(rows, dtype=np.float32)
    w[5, 17] = -0.0
    w[9, :16] = 1e-30  # a block far below the global scale: flushes to zero
    w[10, 3] = -1e-30  # a tiny negative: magnitude 0, sign kept
    return w


CASES = {**_matrices(), "wide": wide_range(np.random.default_rng(7))}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("workers", [1, 3])
def test_kernel_equals_numpy_and_the_scalar_reference(name: str, workers: int):
    raw = to_bf16(CASES[name])
    fast = kernel.quantise_bf16(raw, workers)
    plain = atlas.quantise(atlas.bf16_to_f32(raw))
    packed, scales, scale2 = quantise_scalar(atlas.bf16_to_f32(raw))
    assert fast.weight_scale_2 == plain.weight_scale_2 == scale2
    assert np.array_equal(fast.weight_scale, plain.weight_scale) and np.array_equal(fast.weight_scale, scales)
    assert np.array_equal(fast.weight, plain.weight) and np.array_equal(fast.weight, packed)


def test_kernel_on_many_random_matrices_of_bf16():
    rng = np.random.default_rng(11)
    for _ in range(20):
        n, k = 16 * int(rng.integers(1, 12)), 16 * int(rng.integers(1, 40))
        w = (rng.standard_t(3, size=(n, k)) * 10.0 ** rng.uniform(-6, 3)).astype(np.float32)
        raw = to_bf16(w)
        fast, plain = kernel.quantise_bf16(raw, 2), atlas.quantise(atlas.bf16_to_f32(raw))
        assert np.array_equal(fast.weight, plain.weight) and np.array_equal(fast.weight_scale, plain.weight_scale)


@pytest.mark.parametrize("top", [1e-36, 8e-36, 2e-38, 3e-39])
def test_a_global_scale_that_underflows_encodes_as_the_reference_does(top: float):
    """absmax below ~8e-36: 1/scale2 overflows, a zero block's scale is 0*inf (NaN, code 0 in the
    reference) and a nonzero block's inf (0x7E); every route must give the reference's bytes."""
    w = np.zeros((32, 64), dtype=np.float32)
    w[0, :16] = top
    w[3, 20] = -top / 2
    w[17, 40:48] = top / 4
    raw = to_bf16(w)
    with np.errstate(over="ignore", invalid="ignore"):  # the reference meets the same inf and NaN
        packed, scales, scale2 = quantise_scalar(atlas.bf16_to_f32(raw))
    for got in (
        kernel.quantise_bf16(raw, 1),
        kernel.quantise_bf16(raw, 3),
        atlas.quantise_bf16(raw),
        atlas.quantise(atlas.bf16_to_f32(raw)),
    ):
        assert got.weight_scale_2 == scale2
        assert np.array_equal(got.weight_scale, scales) and np.array_equal(got.weight, packed)


def test_numpy_rows_route_equals_the_whole_matrix_one():
    rng = np.random.default_rng(5)
    raw = to_bf16(rng.standard_normal((16 * 9, 256)).astype(np.float32))
    whole, rows = atlas.quantise(atlas.bf16_to_f32(raw)), atlas.quantise_bf16(raw)
    assert np.array_equal(whole.weight, rows.weight) and np.array_equal(whole.weight_scale, rows.weight_scale)


@pytest.mark.parametrize("bits", [0x7F80, 0xFF80, 0x7FC0])  # +inf, -inf, NaN
def test_non_finite_values_are_a_clear_error(bits: int):
    raw = np.zeros((16, 16), dtype=np.uint16)
    raw[3, 7] = bits
    with pytest.raises(atlas.QuantError, match="non-finite"):
        kernel.quantise_bf16(raw)


def test_bad_shapes_are_refused():
    with pytest.raises(atlas.QuantError, match="multiples of 16"):
        kernel.quantise_bf16(np.zeros((16, 24), dtype=np.uint16))


def test_the_converter_uses_the_kernel_and_writes_what_the_numpy_route_writes(tmp_path, monkeypatch):
    source = make_source(tmp_path / "ckpt")
    fast = overlay.convert(source, tmp_path / "fast", match=MATCH, expect=6, workers=2, device="cpu")
    receipt = json.loads((tmp_path / "fast" / overlay.RECEIPT).read_text())
    assert fast.converted == 6 and receipt["route"] == "cpu-kernel"
    monkeypatch.setattr(overlay.kernel, "available", lambda: False)
    overlay.convert(source, tmp_path / "plain", match=MATCH, expect=6, workers=2, device="cpu")
    assert json.loads((tmp_path / "plain" / overlay.RECEIPT).read_text())["route"] == "cpu-numpy"
    for shard in sorted(p.name for p in (tmp_path / "fast").glob("*.safetensors")):
        assert (tmp_path / "fast" / shard).read_bytes() == (tmp_path / "plain" / shard).read_bytes(), shard


def test_the_team_gives_the_same_bytes_from_many_threads_at_once_and_after_a_fork():
    """The kernel's own team of threads: matrices from several Python threads at once (one matrix at a time
    uses the team), with more parts than rows of blocks and a growing team, and in a forked child (which has
    none of its parent's threads and must make its own)."""
    rng = np.random.default_rng(7)
    raws = [to_bf16(rng.standard_normal((16 * (i + 1), 64)).astype(np.float32)) for i in range(6)]
    want = [atlas.quantise(atlas.bf16_to_f32(raw)) for raw in raws]

    def same(raw: np.ndarray, ref: atlas.Quantised, workers: int) -> bool:
        got = kernel.quantise_bf16(raw, workers)
        return bool(
            np.array_equal(got.weight, ref.weight)
            and np.array_equal(got.weight_scale, ref.weight_scale)
            and got.weight_scale_2 == ref.weight_scale_2
        )

    with concurrent.futures.ThreadPoolExecutor(4) as threads:
        jobs = [threads.submit(same, raw, ref, w) for w in (2, 5, 64) for raw, ref in zip(raws, want, strict=True)]
        assert all(job.result() for job in jobs)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's exit status is the assertion
        os._exit(0 if same(raws[-1], want[-1], 4) else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    bad = raws[0].copy()
    bad[3, 5] = 0x7FC0  # a NaN, found by whichever member holds that row
    with pytest.raises(atlas.QuantError, match="non-finite"):
        kernel.quantise_bf16(bad, 8)
