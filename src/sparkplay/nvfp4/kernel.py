"""The fast CPU path: kernel.c, compiled once per machine with the system C compiler, called through ctypes.

Same bytes as atlas.quantise (tests/test_nvfp4_kernel.py checks it against
both the numpy code and the scalar reference), one fused pass over the BF16
bits after the global maximum, and no float32 copy of the tensor. Rows are
split over the kernel's own team of threads, made once per process, which
gives part i to thread i in both passes: the rows a core read for the
maximum are still in its cache when it encodes them (a pool that hands parts
to whichever thread is free reads the matrix from memory twice). One matrix
at a time uses the team; the converter overlaps reading, hashing and writing
around it. Where no C compiler is available the
converter falls back to the numpy code and says so in its receipt.

The compiled library is cached by the source's hash and the machine type in
$SPARKPLAY_KERNEL_DIR, else $XDG_CACHE_HOME/sparkplay, else ~/.cache/sparkplay.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import itertools
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sparkplay.nvfp4 import atlas

SOURCE = Path(__file__).with_name("kernel.c")
# -ffp-contract=off: no fused multiply-add, so every float32 step rounds as numpy's does
FLAGS = ("-O3", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-pthread")
# tuned for this CPU where the compiler can, first with 512-bit vectors (on an AVX-512 Xeon of the GPU
# host the encoding ran 1557 against 1085 MB/s a core with the compiler's default 256; an option other
# CPUs' compilers refuse, so the next attempt follows), then without
ARCH_ATTEMPTS = (("-march=native", "-mprefer-vector-width=512"), ("-march=native",), ())


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
        # the cache key names the CPU, so a shared home never hands one machine's build to another
        for arch in ARCH_ATTEMPTS:
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
    flags = " ".join(FLAGS) + repr(ARCH_ATTEMPTS)
    digest = hashlib.sha256(SOURCE.read_bytes() + flags.encode() + cpu_identity()).hexdigest()[:16]
    target = cache_dir() / f"nvfp4-kernel-{digest}-{platform.machine()}.so"
    try:
        if not target.exists():
            build(target)
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.CalledProcessError):
        return None
    lib.nvfp4_absmax_bf16.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint16)]
    lib.nvfp4_absmax_bf16.restype = ctypes.c_int
    lib.nvfp4_absmax_rows.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.POINTER(ctypes.c_uint16),
    ]
    lib.nvfp4_absmax_rows.restype = ctypes.c_int
    lib.nvfp4_atlas_rows.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    lib.nvfp4_atlas_rows.restype = None
    lib.nvfp4_team.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int,
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint16),
    ]
    lib.nvfp4_team.restype = ctypes.c_int
    return lib


def available() -> bool:
    return library() is not None


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def pool() -> concurrent.futures.ThreadPoolExecutor:
    """One pool of every core for the process, made on first use: no thread setup per tensor."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="nvfp4")
        return _POOL


_TEAM = threading.Lock()  # the two passes of one matrix run back to back on the team


def quantise_bf16(raw: npt.NDArray[np.uint16], workers: int = 1, *, team: bool = True) -> atlas.Quantised:
    """Quantise one BF16 matrix [n, k], given as its bit patterns, by the Atlas rules.

    `workers` > 1 splits the rows over the kernel's team (the shared pool where threads cannot be made,
    or with team=False, the benchmark's comparison), for the global maximum as for the codes; ctypes
    releases the GIL for each call. Callers must not be threads of that pool.
    """
    lib = library()
    if lib is None:
        raise RuntimeError("the NVFP4 CPU kernel is not built (no C compiler?)")
    if raw.ndim != 2 or raw.shape[0] % atlas.BLOCK or raw.shape[1] % atlas.BLOCK:
        raise atlas.QuantError(f"shape {raw.shape} is not 2-D with both dimensions multiples of {atlas.BLOCK}")
    raw = np.ascontiguousarray(raw, dtype=np.uint16)
    n, k = raw.shape
    parts = max(1, min(workers, n // atlas.BLOCK))
    packed = np.empty((n, k // 2), dtype=np.uint8)
    scales = np.empty((n, k // atlas.BLOCK), dtype=np.uint8)
    if parts > 1 and team:
        with _TEAM:
            top = ctypes.c_uint16()
            bad = lib.nvfp4_team(0, raw.ctypes.data, n, k, parts, 0.0, None, None, ctypes.byref(top))
            if bad >= 0:
                scale2 = _scale2(bad, top.value)
                out = (packed.ctypes.data, scales.ctypes.data)
                lib.nvfp4_team(1, raw.ctypes.data, n, k, parts, float(scale2), *out, None)
                return atlas.Quantised(packed, scales, scale2)
    bounds = [n * i // parts for i in range(parts + 1)]
    spans = list(itertools.pairwise(bounds))
    run = (lambda f, items: [f(i) for i in items]) if parts == 1 else (lambda f, items: list(pool().map(f, items)))

    def top_of(span: tuple[int, int]) -> tuple[int, int]:
        bits = ctypes.c_uint16()
        bad = lib.nvfp4_absmax_rows(raw.ctypes.data, k, span[0], span[1], ctypes.byref(bits))
        return bad, bits.value

    tops = run(top_of, spans)
    scale2 = _scale2(max(b for b, _ in tops), max(t for _, t in tops))
    tail = (ctypes.c_float(scale2), packed.ctypes.data, scales.ctypes.data)
    run(lambda span: lib.nvfp4_atlas_rows(raw.ctypes.data, k, span[0], span[1], *tail), spans)
    return atlas.Quantised(packed, scales, scale2)


def _scale2(bad: int, top: int) -> np.float32:
    """The global scale from the largest |x| as BF16 bits, refused as the reference refuses it."""
    if bad:
        raise atlas.QuantError("the matrix holds a non-finite value")
    scale2 = atlas.global_scale(atlas.bf16_to_f32(np.array([top], dtype=np.uint16)))
    if not (np.isfinite(scale2) and scale2 > 0):
        raise atlas.QuantError(f"global scale {scale2} is not finite and positive")
    return scale2
