"""A virtualenv with SGLang's own argument parser, from the package index alone: `python scripts/sglang_venv.py DEST`.

For make test-sglang (tests/test_sglang_parser.py): SGLang's server arguments are parsed by the `sglang`
package itself. The wheel is installed without its dependencies (its CUDA kernels, flashinfer and the rest
serve a GPU, not a parser), then the packages `sglang.srt.server_args` imports, each found missing by
importing it on a machine without a GPU. torch is the index's build of the version this SGLang requires.
A complete DEST (its marker names this version) is left as it is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

VERSION = "0.5.9"  # the SGLang of the images the SGLang recipes here name (scitrera/dgx-spark-sglang:0.5.9)
TORCH = "2.9.1"  # the sglang wheel's own pin (Requires-Dist: torch==2.9.1)
# what sglang.srt.server_args imports (each found missing by importing it here), at the wheel's own pins where it
# has one (Requires-Dist), torchvision at the release made with that torch
IMPORTED = (
    "numpy",
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "packaging",
    "pillow",
    "starlette",
    "pydantic",
    "pyzmq",
    "tqdm",
    "ipython",
    "aiohttp",
    "msgspec",
    "safetensors",
    "openai==2.6.1",
    "partial_json_parser",
    "huggingface_hub",
    "transformers==4.57.1",
    "torchvision==0.24.1",
    "dill",
    "sentencepiece",
)
MARKER = ".sparkplay-sglang"


def main(dest: Path) -> None:
    marker = dest / MARKER
    if marker.is_file() and marker.read_text().strip() == VERSION:
        return
    subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True)
    pip = [str(dest / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run([*pip, f"torch=={TORCH}", *IMPORTED], check=True)
    subprocess.run([*pip, "--no-deps", f"sglang=={VERSION}"], check=True)
    subprocess.run([str(dest / "bin" / "python"), "-c", "import sglang.srt.server_args"], check=True)
    marker.write_text(VERSION + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: sglang_venv.py DEST")
    main(Path(sys.argv[1]).resolve())
