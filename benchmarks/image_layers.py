"""An engine image to another rank: only its missing layers (sparkplay-serve image-send) against the whole image
(`docker save | docker load`, what sparkplay did before), in one run, on this machine.

The other rank is a second Docker engine on this machine (its own data root and socket: a second node cannot
exist here); the cable is the pipe between them, so the figures are the bytes sent and the seconds Docker
and the sender take. The image is generated with a realistic shape: the lab's node image, a large layer
(--base-mib of random bytes: a framework's wheels) and a small top (--top-mib: the engine's own code). Two
moments, each sent both ways from a peer in the same state:
- first copy: the peer holds nothing;
- update: the peer holds the previous version; only the top layer changed.
Needs root and the Docker engine (make setup); the lab's node image is built if missing. The last line is JSON.

    python benchmarks/image_layers.py [--base-mib 2048] [--top-mib 64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "src"))
from sparkplay.lab.image import ImageRecipe, ensure_image  # noqa: E402
from sparkplay.nodetools.serve import image  # noqa: E402

PEER_ROOT = Path("/var/lib/sparkplay-bench-docker")  # beside Docker's own: overlay2 needs a real filesystem
SOCKET = "/run/sparkplay-bench-docker.sock"
PEER = ["docker", "-H", f"unix://{SOCKET}"]
TAG = "sparkplay-bench-layers"
LOG = Path("/run/sparkplay-bench-docker.log")
BRIDGE = "sp-bench0"


def sh(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()


@contextlib.contextmanager
def second_engine() -> Iterator[None]:
    """A second Docker engine, the other rank's: its own data root, exec root, socket, and a bridge of its own
    (it runs no container; `--bridge none` would delete the first engine's docker0 as it starts)."""
    shutil.rmtree(PEER_ROOT, ignore_errors=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", "172.31.254.1/24", "dev", BRIDGE)
    log = LOG.open("w")  # open for the engine's life
    proc = subprocess.Popen(
        [
            "dockerd",
            "--data-root",
            str(PEER_ROOT),
            "--exec-root",
            "/run/sparkplay-bench-docker",
            "--pidfile",
            "/run/sparkplay-bench-docker.pid",
            "-H",
            f"unix://{SOCKET}",
            "--bridge",
            BRIDGE,
            "--iptables=false",
            "--ip-masq=false",
            "--storage-driver",
            "overlay2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(100):
            if subprocess.run([*PEER, "version"], capture_output=True, check=False).returncode == 0:
                break
            if proc.poll() is not None:
                raise SystemExit(f"the second Docker engine did not start: {LOG}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        shutil.rmtree(PEER_ROOT, ignore_errors=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)


def build(version: int, base_mib: int, top_mib: int, scratch: Path) -> str:
    """The image at `version`: the same base and large layer every time (the build cache), a new top."""
    tag = f"{TAG}:{version}"
    (scratch / "Dockerfile").write_text(
        f"FROM {ImageRecipe().tag}\n"
        f"RUN head -c {base_mib}M /dev/urandom > /opt/wheels.bin\n"
        f"ARG VERSION\nRUN head -c {top_mib}M /dev/urandom > /opt/engine.bin && echo $VERSION > /opt/version\n"
    )
    sh("docker", "build", "-q", "--build-arg", f"VERSION={version}", "-t", tag, str(scratch))
    return tag


def peer_clean() -> None:
    ids = sh(*PEER, "image", "ls", "-aq")
    if ids:
        subprocess.run([*PEER, "rmi", "-f", *ids.split()], capture_output=True, check=False)
    subprocess.run([*PEER, "image", "prune", "-af"], capture_output=True, check=False)


def one(tag: str, whole: bool, root: Path) -> dict:
    said = image.send(tag, PEER, "docker", root, whole=whole)
    if sh(*PEER, "image", "inspect", "--format", "{{.Id}}", tag) != sh(
        "docker", "image", "inspect", "--format", "{{.Id}}", tag
    ):
        raise SystemExit(f"{tag} differs on the peer after {'whole' if whole else 'layers'}")
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-mib", type=int, default=2048)
    parser.add_argument("--top-mib", type=int, default=64)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (a second Docker engine)")
    ensure_image(ImageRecipe())
    root = Path(sh("docker", "info", "--format", "{{.DockerRootDir}}"))
    result: dict = {"base_mib": args.base_mib, "top_mib": args.top_mib}
    with tempfile.TemporaryDirectory() as scratch, second_engine():
        first, second = (build(v, args.base_mib, args.top_mib, Path(scratch)) for v in (1, 2))
        try:
            for moment, before, tag in (("first copy", None, first), ("update", first, second)):
                rows = {}
                for how in ("whole", "layers"):
                    peer_clean()
                    if before:
                        one(before, True, root)  # the peer holds the previous version
                    rows[how] = one(tag, how == "whole", root)
                    print(
                        f"{moment}, {how}: {rows[how]['bytes'] / 2**20:.1f} MiB sent in {rows[how]['seconds']} s"
                        + (
                            f" ({rows[how]['layers_sent']} layers sent, {rows[how]['layers_held']} held)"
                            if how == "layers"
                            else ""
                        ),
                        flush=True,
                    )
                rows["bytes_ratio"] = round(rows["layers"]["bytes"] / max(rows["whole"]["bytes"], 1), 4)
                rows["speedup"] = round(rows["whole"]["seconds"] / max(rows["layers"]["seconds"], 0.1), 2)
                result[moment] = rows
        finally:
            subprocess.run(["docker", "rmi", "-f", first, second], capture_output=True, check=False)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
