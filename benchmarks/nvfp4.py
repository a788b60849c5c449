"""NVFP4 (Atlas scheme) quantisation speed, CPU (numpy, one process) and GPU (PyTorch), and byte equality.

Random BF16-valued matrices shaped like MoE experts; prints GB/s of BF16 input
for each path (the CPU figure is the baseline, measured in the same run) and
whether every byte agreed. The last line is JSON.

    python benchmarks/nvfp4.py [--matrices 48] [--rows 2048] [--cols 4096]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkplay.nvfp4 import atlas, gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", type=int, default=48)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--cpu-matrices", type=int, default=4, help="how many the CPU baseline does")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    mats = [atlas.bf16_to_f32((rng.standard_normal((args.rows, args.cols)).astype(np.float32).view(np.uint32) >> 16)
                              .astype(np.uint16)) for _ in range(args.matrices)]  # fmt: skip
    bf16_bytes = args.rows * args.cols * 2
    start = time.perf_counter()
    cpu = [atlas.quantise(m) for m in mats[: args.cpu_matrices]]
    cpu_s = time.perf_counter() - start
    result = {"cpu_gbps": round(bf16_bytes * len(cpu) / cpu_s / 1e9, 3)}
    print(f"CPU (numpy): {result['cpu_gbps']} GB/s of BF16 over {len(cpu)} matrices {args.rows}x{args.cols}")
    if gpu.available():
        import torch

        gpu.quantise(mats[0])  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = [gpu.quantise(m) for m in mats]
        torch.cuda.synchronize()
        gpu_s = time.perf_counter() - start
        equal = all(
            np.array_equal(a.weight, b.weight) and np.array_equal(a.weight_scale, b.weight_scale)
            and a.weight_scale_2 == b.weight_scale_2
            for a, b in zip(cpu, out, strict=False)
        )  # fmt: skip
        result.update({"gpu_gbps": round(bf16_bytes * len(mats) / gpu_s / 1e9, 3), "bytes_equal": equal,
                       "gpu_vs_cpu": round(bf16_bytes * len(mats) / gpu_s / (bf16_bytes * len(cpu) / cpu_s), 1),
                       "device": torch.cuda.get_device_name()})  # fmt: skip
        print(f"GPU ({result['device']}): {result['gpu_gbps']} GB/s incl. host<->device copies, "
              f"{result['gpu_vs_cpu']}x the CPU; bytes equal: {equal}")  # fmt: skip
    else:
        print("GPU: no CUDA device here")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
