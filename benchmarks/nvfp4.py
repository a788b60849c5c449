"""NVFP4 (Atlas scheme) quantisation speed and memory: plain vectorised numpy vs sparkplay's CPU path,
and (where PyTorch sees a CUDA device) the GPU path, on the same matrices in one run.

(a) numpy: the straightforward vectorised implementation (sparkplay.nvfp4.atlas.quantise on the
    matrix widened to float32), one matrix after another, one thread;
(b) cpu: sparkplay's CPU path, the compiled kernel (sparkplay.nvfp4.kernel) on the BF16 bits,
    one matrix at a time with its rows spread over every core, as the converter runs it;
gpu: sparkplay.nvfp4.gpu.quantise, end to end including host<->device copies.
Both CPU routes must give the same bytes. Peak memory is the converter's own: a child process
converts a generated checkpoint of the same matrices and reports how far its peak RSS rose above
where it stood before converting, against the checkpoint's largest tensor. The last line is JSON.

    python benchmarks/nvfp4.py [--matrices 12] [--rows 1536] [--cols 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkplay.nvfp4 import atlas, gpu, kernel, testmodel

GB10_CORES = 20  # 10 Cortex-X925 + 10 Cortex-A725


def converter_memory(rows: int, cols: int, experts: int) -> dict[str, float]:
    """Peak RSS rise of the converter over a generated checkpoint (a child process: a clean high-water mark)."""
    code = f"""
import json, os, sys, threading, time
from pathlib import Path
from sparkplay.nvfp4 import overlay
from sparkplay.nvfp4.safetensors import read_header
work = Path(sys.argv[1])
largest = max(i.nbytes for f in (work / "ckpt").glob("*.safetensors") for i in read_header(f)[0].values())
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    return int(Path("/proc/self/statm").read_text().split()[1]) * page
# the resident set sampled every millisecond while converting (ru_maxrss would also count start-up)
before, peak, done = rss(), [0], threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)
watcher = threading.Thread(target=sample)
watcher.start()
started = time.perf_counter()
overlay.convert(work / "ckpt", work / "out", match=r"experts\\.\\d+\\.(gate|up|down)_proj\\.weight$",
                expect={experts * 3}, device="cpu")
took = time.perf_counter() - started
done.set()
watcher.join()
print(json.dumps({{"rise_mb": (peak[0] - before) / 2**20, "largest_mb": largest / 1e6, "seconds": took,
                   "route": json.loads((work / "out" / overlay.RECEIPT).read_text())["route"]}}))
"""
    # the checkpoint is made here, so the measuring child's high-water mark is the converter's alone
    with tempfile.TemporaryDirectory() as work:
        testmodel.make_checkpoint(Path(work) / "ckpt", experts=experts, rows=rows, cols=cols)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
        done = subprocess.run([sys.executable, "-c", code, work], capture_output=True, text=True, env=env, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", type=int, default=12)
    parser.add_argument("--rows", type=int, default=1536)
    parser.add_argument("--cols", type=int, default=2048)
    args = parser.parse_args()
    if not kernel.available():
        raise SystemExit("no C compiler: the CPU kernel cannot be built here (apt-get install gcc)")
    cores = os.cpu_count() or 1
    rng = np.random.default_rng(0)
    raws = [(rng.standard_normal((args.rows, args.cols)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            for _ in range(args.matrices)]  # fmt: skip
    mb = args.rows * args.cols * 2 * args.matrices / 1e6

    kernel.quantise_bf16(raws[0], cores)  # warm: the build and the first call
    start = time.perf_counter()
    plain = [atlas.quantise(atlas.bf16_to_f32(r)) for r in raws]
    numpy_s = time.perf_counter() - start
    start = time.perf_counter()
    fast = [kernel.quantise_bf16(r, cores) for r in raws]
    cpu_s = time.perf_counter() - start
    start = time.perf_counter()
    one_core = [kernel.quantise_bf16(r, 1) for r in raws[: max(1, args.matrices // 3)]]
    one_core_mbps = mb * len(one_core) / args.matrices / (time.perf_counter() - start)
    equal = all(
        np.array_equal(a.weight, b.weight) and np.array_equal(a.weight_scale, b.weight_scale)
        and a.weight_scale_2 == b.weight_scale_2
        for a, b in zip(plain, fast, strict=True)
    )  # fmt: skip
    if not equal:
        raise SystemExit("the kernel gave other bytes than the numpy code")
    memory = converter_memory(args.rows, args.cols, experts=max(2, args.matrices // 3))
    result = {
        "numpy_mbps": round(mb / numpy_s, 1),
        "cpu_mbps": round(mb / cpu_s, 1),
        "ratio": round(numpy_s / cpu_s, 2),
        "peak_rss_mb": round(memory["rise_mb"], 1),
        "largest_tensor_mb": round(memory["largest_mb"], 1),
        "peak_over_largest": round(memory["rise_mb"] * 1.048576 / memory["largest_mb"], 2),
        "converter_route": memory["route"],
        "converter_mbps": round(memory["largest_mb"] * max(2, args.matrices // 3) * 3 / memory["seconds"], 1),
        "kernel_one_core_mbps": round(one_core_mbps, 1),
        "gb10_s_per_gb_projected": round(1e3 / (one_core_mbps * GB10_CORES * 0.7), 2),
        "bytes_equal": equal,
        "cores": cores,
    }
    print(f"{args.matrices} matrices {args.rows}x{args.cols} BF16 ({mb:.0f} MB), {cores} cores")
    print(f"(a) numpy, vectorised, one thread : {result['numpy_mbps']:8.1f} MB/s")
    print(f"(b) sparkplay CPU kernel, {cores} cores : {result['cpu_mbps']:8.1f} MB/s   b/a = {result['ratio']}"
          f"   (one core {result['kernel_one_core_mbps']} MB/s); bytes equal: {equal}")  # fmt: skip
    print(f"converter's peak memory rise {result['peak_rss_mb']} MB, largest tensor {result['largest_tensor_mb']} MB "
          f"({result['peak_over_largest']}x; route {result['converter_route']})")  # fmt: skip
    print(f"projected on a GB10 ({GB10_CORES} cores at this per-core rate, 70% scaling): "
          f"{result['gb10_s_per_gb_projected']} s per GB of BF16 matrices")  # fmt: skip
    if gpu.available():
        import torch

        mats = [atlas.bf16_to_f32(r) for r in raws]
        gpu.quantise(mats[0])
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = [gpu.quantise(m) for m in mats]
        torch.cuda.synchronize()
        gpu_s = time.perf_counter() - start
        same = all(np.array_equal(a.weight, b.weight) and np.array_equal(a.weight_scale, b.weight_scale)
                   for a, b in zip(plain, out, strict=True))  # fmt: skip
        result["gpu_gbps"] = round(mb / 1e3 / gpu_s, 3)
        result["gpu_bytes_equal"] = same
        print(f"GPU ({torch.cuda.get_device_name()}): {result['gpu_gbps']} GB/s incl. copies; bytes equal: {same}")
    result["benchmark_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
