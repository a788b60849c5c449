"""NVFP4 (Atlas scheme) speed and memory, every figure against a baseline measured in the same run.

Baseline (a) numpy: the straightforward vectorised implementation a good engineer writes first
    (sparkplay.nvfp4.atlas.quantise on the matrix widened to float32: block maxima, the E4M3
    scale, the E2M1 code as seven comparisons), one matrix after another, one thread.
(b) the compiled kernel (sparkplay.nvfp4.kernel) on the BF16 bits: on one core, and on every core
    as the converter runs it (rows split over the kernel's own team, part i to thread i in both passes),
    beside the same kernel with its parts handed to a shared pool's free threads. Bytes must equal (a)'s.
(c) the whole converter (read, quantise, hash, write a generated checkpoint from page cache) on
    every route this host has, with its peak memory against the largest tensor.
(d) where PyTorch sees a CUDA device: the GPU quantise alone (data already on the device), the
    GPU path from host BF16 (copies included), and the converter end to end on the GPU route.
The last line is JSON.

    python benchmarks/nvfp4.py [--matrices 12] [--rows 2048] [--cols 6144] [--experts 16]   # 25 MB matrices
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkplay.nvfp4 import atlas, gpu, kernel, testmodel

GB10_CORES = 20  # 10 Cortex-X925 + 10 Cortex-A725
SRC = str(Path(__file__).resolve().parents[1] / "src")

CONVERTER = """
import json, os, sys, threading, time
from pathlib import Path
from sparkplay.nvfp4 import kernel, overlay
from sparkplay.nvfp4.safetensors import read_header
work, route, experts, out_root = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
if route == "cpu-numpy":
    kernel.available = lambda: False  # the route a node without a C compiler takes
largest = max(i.nbytes for f in (work / "ckpt").glob("*.safetensors") for i in read_header(f)[0].values())
converted = sum(i.nbytes for f in (work / "ckpt").glob("*.safetensors") for n, i in read_header(f)[0].items()
                if ".experts." in n)
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    return int(Path("/proc/self/statm").read_text().split()[1]) * page
if route == "gpu":  # CUDA's own start-up (context, the kernels it loads on first use) is not the converter's
    import numpy as np
    from sparkplay.nvfp4 import gpu
    gpu.quantise_bf16(np.zeros((16, 16), dtype=np.uint16) + 0x3F80)
kernel.pool()
# the resident set sampled every millisecond while converting (ru_maxrss would also count start-up)
before, peak, done = rss(), [0], threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)
watcher = threading.Thread(target=sample)
watcher.start()
started = time.perf_counter()
result = overlay.convert(work / "ckpt", out_root / ("out-" + route),
                         match=r"experts\\.\\d+\\.(gate|up|down)_proj\\.weight$",
                         expect=experts * 3, device="gpu" if route == "gpu" else "cpu")
took = time.perf_counter() - started
done.set()
watcher.join()
print(json.dumps({"rise_mb": (peak[0] - before) / 2**20, "largest_mb": largest / 1e6, "seconds": took,
                  "converted_mb": converted / 1e6, "route": result.route}))
"""


def manifest(checkpoint: Path) -> None:
    """sparkplay-ckpt's manifest and marker, as every mirrored checkpoint on a node has them (the checkpoint
    role's hashing, not the converter's): the converter then proves the source by it instead of hashing."""
    from sparkplay.nodetools import app

    subprocess.run(
        [sys.executable, app("ckpt"), "manifest", str(checkpoint), "--revision", "bench"],
        check=True,
        capture_output=True,
    )


def converter(work: Path, route: str, experts: int, out_root: Path | None = None) -> dict[str, float]:
    """One conversion in a child process (a clean high-water mark), the checkpoint already in page cache;
    the overlay written beside it, or under `out_root` (memory, to show the converter without the disk)."""
    env = {**os.environ, "PYTHONPATH": SRC}
    argv = [sys.executable, "-c", CONVERTER, str(work), route, str(experts), str(out_root or work)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def rate(mb: float, run, repeat: int = 1) -> float:  # noqa: ANN001
    started = time.perf_counter()
    for _ in range(repeat):
        run()
    return mb * repeat / (time.perf_counter() - started)


def same(a: atlas.Quantised, b: atlas.Quantised) -> bool:
    return (
        np.array_equal(a.weight, b.weight)
        and np.array_equal(a.weight_scale, b.weight_scale)
        and a.weight_scale_2 == b.weight_scale_2
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", type=int, default=12)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=6144)
    parser.add_argument("--experts", type=int, default=16, help="experts (x3 matrices) in the converter's checkpoint")
    args = parser.parse_args()
    if not kernel.available():
        raise SystemExit("no C compiler: the CPU kernel cannot be built here (apt-get install gcc)")
    cores = os.cpu_count() or 1
    rng = np.random.default_rng(0)
    raws = [
        (rng.standard_normal((args.rows, args.cols)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        for _ in range(args.matrices)
    ]
    mb = args.rows * args.cols * 2 * args.matrices / 1e6
    mb_one = args.rows * args.cols * 2  # bytes of one matrix

    kernel.quantise_bf16(raws[0], cores)  # warm: the build, the pool, the first call
    plain: list[atlas.Quantised] = []
    numpy_mbps = rate(mb, lambda: plain.extend(atlas.quantise(atlas.bf16_to_f32(r)) for r in raws))
    fast: list[atlas.Quantised] = []
    cpu_mbps = rate(mb, lambda: fast.extend(kernel.quantise_bf16(r, cores) for r in raws))
    pooled: list[atlas.Quantised] = []  # the same kernel, parts handed to whichever pool thread is free
    pool_mbps = rate(mb, lambda: pooled.extend(kernel.quantise_bf16(r, cores, team=False) for r in raws))
    one = [kernel.quantise_bf16(r, 1) for r in raws[:2]]
    one_core_mbps = rate(mb, lambda: [kernel.quantise_bf16(r, 1) for r in raws])
    equal = all(map(same, plain, fast)) and all(map(same, plain, pooled)) and all(map(same, plain[:2], one))
    if not equal:
        raise SystemExit("the kernel gave other bytes than the numpy code")

    routes = ["cpu-kernel", "cpu-numpy"] + (["gpu"] if gpu.available() else [])
    with tempfile.TemporaryDirectory() as work:
        testmodel.make_checkpoint(Path(work) / "ckpt", experts=args.experts, rows=args.rows, cols=args.cols)
        unproven = converter(Path(work), "cpu-kernel", args.experts)  # every source byte hashed by the converter
        manifest(Path(work) / "ckpt")
        for old in Path(work).glob("out-*"):
            subprocess.run(["rm", "-rf", str(old)], check=True)
        runs = {route: converter(Path(work), route, args.experts) for route in routes}
        # the same, the overlay written to memory (tmpfs): what the converter does where the disk is not its bound
        in_memory: dict[str, dict[str, float]] = {}
        shm = Path("/dev/shm")  # noqa: S108 - a private folder is made inside it
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 4 * (args.experts * 3 * mb_one):
            with tempfile.TemporaryDirectory(dir=shm) as memory:
                for route in [r for r in routes if r != "cpu-numpy"]:
                    in_memory[route] = converter(Path(work), route, args.experts, Path(memory))
                    subprocess.run(["rm", "-rf", str(Path(memory) / f"out-{route}")], check=True)
    result: dict[str, object] = {
        "numpy_mbps": round(numpy_mbps, 1),
        "cpu_mbps": round(cpu_mbps, 1),
        "ratio": round(cpu_mbps / numpy_mbps, 2),
        "kernel_one_core_mbps": round(one_core_mbps, 1),
        "one_core_ratio": round(one_core_mbps / numpy_mbps, 2),
        "cores": cores,
        "scaling": round(cpu_mbps / (one_core_mbps * cores), 2),
        "kernel_pool_mbps": round(pool_mbps, 1),
        "pool_scaling": round(pool_mbps / (one_core_mbps * cores), 2),
        "converter_mbps": round(runs["cpu-kernel"]["converted_mb"] / runs["cpu-kernel"]["seconds"], 1),
        "peak_rss_mb": round(max(r["rise_mb"] for r in runs.values()), 1),
        "largest_tensor_mb": round(runs["cpu-kernel"]["largest_mb"], 1),
        "bytes_equal": equal,
    }
    result["converter_over_kernel"] = round(float(result["converter_mbps"]) / cpu_mbps, 2)
    if in_memory:
        result["converter_to_memory_mbps"] = {
            r: round(v["converted_mb"] / v["seconds"], 1) for r, v in in_memory.items()
        }
    result["converter_hashing_source_mbps"] = round(unproven["converted_mb"] / unproven["seconds"], 1)
    # the converter writes 9/16 of the bytes it converts and must make them durable: this disk's
    # write-and-fsync rate, measured now, bounds it at that rate x 16/9
    with tempfile.NamedTemporaryFile(dir=tempfile.gettempdir()) as fh:
        block = os.urandom(64 << 20)
        started = time.perf_counter()
        for _ in range(4):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
        write_gbps = 4 * 64 * 1.048576 / 1e3 / (time.perf_counter() - started)
    result["disk_write_fsync_gbps"] = round(write_gbps, 2)
    result["converter_ceiling_mbps"] = round(write_gbps * 1e3 * 16 / 9, 1)
    result["routes"] = {
        route: {
            "mbps": round(r["converted_mb"] / r["seconds"], 1),
            "peak_rss_mb": round(r["rise_mb"], 1),
            "peak_over_largest": round(r["rise_mb"] * 1.048576 / r["largest_mb"], 2),
        }
        for route, r in runs.items()
    }
    result["gb10_s_per_gb_projected"] = round(1e3 / (one_core_mbps * GB10_CORES * 0.7), 2)
    print(f"{args.matrices} matrices {args.rows}x{args.cols} BF16 ({mb:.0f} MB), {cores} cores")
    print(f"(a) numpy, vectorised, one thread   : {numpy_mbps:9.1f} MB/s  (baseline)")
    print(f"(b) kernel, one core                : {one_core_mbps:9.1f} MB/s  {result['one_core_ratio']}x (a)")
    print(
        f"    kernel, {cores:2d} cores               : {cpu_mbps:9.1f} MB/s  {result['ratio']}x (a), "
        f"scaling {result['scaling']} of {cores}x one core (the kernel's team: part i to thread i in both "
        f"passes); bytes equal: {equal}"
    )
    print(
        f"    kernel, {cores:2d} cores, shared pool  : {pool_mbps:9.1f} MB/s  scaling {result['pool_scaling']} "
        f"(parts to whichever thread is free: the matrix read from memory twice)"
    )
    for route, r in result["routes"].items():  # type: ignore[union-attr]
        print(
            f"(c) converter, route {route:10s}   : {r['mbps']:9.1f} MB/s, peak memory {r['peak_rss_mb']} MB "
            f"= {r['peak_over_largest']}x the largest tensor ({result['largest_tensor_mb']} MB)"
        )
    print(
        f"    the disk writes and fsyncs {result['disk_write_fsync_gbps']} GB/s: the converter's ceiling is "
        f"{result['converter_ceiling_mbps']} MB/s of converted matrices (it writes 9/16 of what it reads)"
    )
    print(
        f"    converter / kernel on every core: {result['converter_over_kernel']} (source proven by its checkpoint "
        f"manifest, as on a node; hashing every source byte itself: {result['converter_hashing_source_mbps']} MB/s)"
    )
    if in_memory:
        print(f"    the overlay written to memory (tmpfs), not the disk: {result['converter_to_memory_mbps']} MB/s")
    if gpu.available():
        import torch

        dev = [torch.from_numpy(r.view(np.int16)).cuda() for r in raws]
        wide = [(d.to(torch.int32) << 16).view(torch.float32) for d in dev]
        gpu._quantise_on_device(wide[0])
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(5):
            for w in wide:
                gpu._quantise_on_device(w)
        torch.cuda.synchronize()
        result["gpu_quantise_gbps"] = round(mb * 5 / 1e3 / (time.perf_counter() - started), 2)
        out = [gpu.quantise_bf16(r) for r in raws]
        result["gpu_from_host_gbps"] = round(rate(mb, lambda: [gpu.quantise_bf16(r) for r in raws]) / 1e3, 2)
        result["gpu_bytes_equal"] = all(same(a, b) for a, b in zip(plain, out, strict=True))
        result["gpu_end_to_end_gbps"] = round(result["routes"]["gpu"]["mbps"] / 1e3, 2)  # type: ignore[index]
        if "gpu" in in_memory:
            result["gpu_end_to_end_memory_gbps"] = round(result["converter_to_memory_mbps"]["gpu"] / 1e3, 2)  # type: ignore[index]
        print(
            f"(d) GPU ({torch.cuda.get_device_name()}): quantise on the device {result['gpu_quantise_gbps']} GB/s, "
            f"from host BF16 {result['gpu_from_host_gbps']} GB/s, converter end to end "
            f"{result['gpu_end_to_end_gbps']} GB/s; bytes equal: {result['gpu_bytes_equal']}"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
