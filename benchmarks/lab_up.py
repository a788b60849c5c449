"""How long `sparkplay lab up` takes from a cached image, against a hand-made baseline.

Baseline (same run, same image, same flags): what a shell script would do
by hand, `docker run` two systemd containers and wait until systemd runs,
with no cable, no checks and no inventory. The ratio is sparkplay's
overhead over that floor. Needs root and a Docker engine (make setup).

    python benchmarks/lab_up.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sparkplay.lab.image import ImageRecipe
from sparkplay.lab.manager import cgroup_v2_root, systemd_flags

PROJECT = Path(__file__).resolve().parents[1]


def sh(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=300).stdout


def cli(*args: str) -> None:
    sh(sys.executable, "-m", "sparkplay", *args, "--project-dir", str(PROJECT))


def timed(func) -> float:  # noqa: ANN001
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def baseline(tag: str) -> None:
    names = [f"sparkplay-bench-{i}" for i in range(2)]
    try:
        for name in names:
            sh(
                "docker",
                "run",
                "-d",
                "--name",
                name,
                "--hostname",
                name,
                *systemd_flags(cgroup_v2_root()),
                tag,
            )
        for name in names:
            while True:
                state = subprocess.run(
                    ["docker", "exec", name, "systemctl", "is-system-running"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout.strip()
                if state in ("running", "degraded"):
                    break
                time.sleep(0.25)
    finally:
        sh("docker", "rm", "-f", *names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds

    cli("lab", "up")  # builds the image if needed: not what is measured
    cli("lab", "down")
    tag = ImageRecipe().tag
    base, cold, warm = [], [], []
    for _ in range(rounds):
        base.append(timed(lambda: baseline(tag)))
        cold.append(timed(lambda: cli("lab", "up")))
        warm.append(timed(lambda: cli("lab", "up")))
        cli("lab", "down")

    med = statistics.median
    print(f"rounds: {rounds} (medians; image {tag} cached)")
    print(f"baseline: docker run x2 + wait for systemd : {med(base):6.2f} s")
    print(f"sparkplay lab up, 2 nodes, from cached image: {med(cold):6.2f} s  ({med(cold) / med(base):.2f}x baseline)")
    print(f"sparkplay lab up again, nothing to change   : {med(warm):6.2f} s  ({med(warm) / med(base):.2f}x baseline)")
    print(f"target: lab up from cached image under 30 s: {'met' if max(cold) < 30 else 'NOT met'}")


if __name__ == "__main__":
    main()
