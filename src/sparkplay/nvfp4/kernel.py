"""The fast CPU path: kernel.c, compiled once per machine with the system C compiler, called through ctypes.

Same bytes as atlas.quantise (tests/test_nvfp4_kernel.py checks it against
both the numpy code and the scalar reference), one fused pass over the BF16
bits, rows split over every core (ctypes releases the GIL for the call), and
no float32 copy of the tensor. Where no C compiler is available the
converter falls back to the numpy code and says so in its receipt.

The compiled library is cached by the source's hash and the machine type in
$SPARKPLAY_KERNEL_DIR, else $XDG_CACHE_HOME/sparkplay, else ~/.cache/sparkplay.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sparkplay.nvfp4 import atlas

SOURCE = Path(__file__).with_name("kernel.c")
# -ffp-contract=off: no fused multiply-add, so every float32 step rounds as numpy's does
FLAGS = ("-O3", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared")


def cache_dir() -> Path:
    if os.environ.get("SPARKPLAY_KERNEL_DIR"):
        return Path(os.environ["SPARKPLAY_KERNEL_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparkplay"


def build(target: Path) -> None:
    """Compile kernel.c into `target` (atomically); raises OSError/CalledProcessError when it cannot."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise FileNotFoundError("no C compiler (cc or gcc) on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        # tuned for this CPU where the compiler can; the cache key names the CPU, so a shared
        # home never hands one machine's build to another
        for arch in (["-march=native"], []):
            done = subprocess.run(
                [compiler, *FLAGS, *arch, str(SOURCE), "-o", str(built), "-lm"], capture_output=True, check=False
            )
            if done.returncode == 0:
                break
        else:
            raise OSError(f"{compiler} could not build {SOURCE.name}: {done.stderr.decode(errors='replace')[-300:]}")
        built.replace(target)


def cpu_identity() -> bytes:
    """What -march=native depends on: the CPU model and its feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return platform.processor().encode()
    keys = ("model name", "flags", "Features", "CPU part", "CPU implementer")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in keys})).encode()


@cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel, built on first use; None when it cannot be built here."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode() + cpu_identity()).hexdigest()[:16]
    target = cache_dir() / f"nvfp4-kernel-{digest}-{platform.machine()}.so"
    try:
        if not target.exists():
            build(target)
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.CalledProcessError):
        return None
    lib.nvfp4_absmax_bf16.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint16)]
    lib.nvfp4_absmax_bf16.restype = ctypes.c_int
    lib.nvfp4_atlas_rows.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                     ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]  # fmt: skip
    lib.nvfp4_atlas_rows.restype = None
    return lib


def available() -> bool:
    return library() is not None


def quantise_bf16(raw: npt.NDArray[np.uint16], workers: int = 1) -> atlas.Quantised:
    """Quantise one BF16 matrix [n, k], given as its bit patterns, by the Atlas rules."""
    lib = library()
    if lib is None:
        raise RuntimeError("the NVFP4 CPU kernel is not built (no C compiler?)")
    if raw.ndim != 2 or raw.shape[0] % atlas.BLOCK or raw.shape[1] % atlas.BLOCK:
        raise atlas.QuantError(f"shape {raw.shape} is not 2-D with both dimensions multiples of {atlas.BLOCK}")
    raw = np.ascontiguousarray(raw, dtype=np.uint16)
    n, k = raw.shape
    top = ctypes.c_uint16()
    if lib.nvfp4_absmax_bf16(raw.ctypes.data, raw.size, ctypes.byref(top)):
        raise atlas.QuantError("the matrix holds a non-finite value")
    scale2 = atlas.global_scale(atlas.bf16_to_f32(np.array([top.value], dtype=np.uint16)))
    packed = np.empty((n, k // 2), dtype=np.uint8)
    scales = np.empty((n, k // atlas.BLOCK), dtype=np.uint8)
    args = (raw.ctypes.data, k)
    tail = (ctypes.c_float(scale2), packed.ctypes.data, scales.ctypes.data)
    parts = max(1, min(workers, n // atlas.BLOCK))
    bounds = [n * i // parts for i in range(parts + 1)]
    if parts == 1:
        lib.nvfp4_atlas_rows(*args, 0, n, *tail)
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=parts) as pool:
            list(pool.map(lambda i: lib.nvfp4_atlas_rows(*args, bounds[i], bounds[i + 1], *tail), range(parts)))
    return atlas.Quantised(packed, scales, scale2)
