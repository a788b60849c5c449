"""NVFP4 (Atlas scheme) quantisation speed: a plain vectorised numpy run, sparkplay's CPU path,
and (where PyTorch sees a CUDA device) the GPU path, on the same matrices in one run.

(a) numpy: sparkplay.nvfp4.atlas.quantise on one matrix after another (one thread);
(b) cpu: the converter's CPU path, the same function on a thread pool of every core
    (numpy releases the GIL), as the overlay converter runs it;
gpu: sparkplay.nvfp4.gpu.quantise, end to end including host<->device copies.
Prints MB/s of BF16 input, the ratio b/a, peak memory and the largest tensor,
and checks the GPU's bytes equal the CPU's. The last line is JSON.

    python benchmarks/nvfp4.py [--matrices 16] [--rows 1536] [--cols 2048]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkplay.nvfp4 import atlas, gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", type=int, default=16)
    parser.add_argument("--rows", type=int, default=1536)
    parser.add_argument("--cols", type=int, default=2048)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    raw = [(rng.standard_normal((args.rows, args.cols)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
           for _ in range(args.matrices)]  # fmt: skip
    mats = [atlas.bf16_to_f32(r) for r in raw]
    mb = args.rows * args.cols * 2 * args.matrices / 1e6

    start = time.perf_counter()
    plain = [atlas.quantise(m) for m in mats]
    numpy_s = time.perf_counter() - start
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        threaded = list(pool.map(atlas.quantise, mats))
    cpu_s = time.perf_counter() - start
    if not all(np.array_equal(a.weight, b.weight) for a, b in zip(plain, threaded, strict=True)):
        raise SystemExit("the threaded CPU path gave other bytes than the plain one")
    result = {
        "numpy_mbps": round(mb / numpy_s, 1),
        "cpu_mbps": round(mb / cpu_s, 1),
        "ratio": round(numpy_s / cpu_s, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "largest_tensor_mb": round(args.rows * args.cols * 2 / 1e6, 1),
        "cores": os.cpu_count(),
    }
    print(f"{args.matrices} matrices {args.rows}x{args.cols} BF16 ({mb:.0f} MB), {os.cpu_count()} cores")
    print(f"(a) numpy, one after another : {result['numpy_mbps']:8.1f} MB/s")
    print(f"(b) sparkplay CPU path       : {result['cpu_mbps']:8.1f} MB/s   b/a = {result['ratio']}")
    print(f"peak RSS {result['peak_rss_mb']} MB (inputs held in memory: {mb:.0f} MB); largest tensor "
          f"{result['largest_tensor_mb']} MB")  # fmt: skip
    if gpu.available():
        import torch

        gpu.quantise(mats[0])
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = [gpu.quantise(m) for m in mats]
        torch.cuda.synchronize()
        gpu_s = time.perf_counter() - start
        equal = all(
            np.array_equal(a.weight, b.weight) and np.array_equal(a.weight_scale, b.weight_scale)
            and a.weight_scale_2 == b.weight_scale_2
            for a, b in zip(plain, out, strict=True)
        )  # fmt: skip
        result["gpu_gbps"] = round(mb / 1e3 / gpu_s, 3)
        result["gpu_bytes_equal"] = equal
        print(f"GPU ({torch.cuda.get_device_name()}): {result['gpu_gbps']} GB/s incl. copies; bytes equal: {equal}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
