"""The lab's staged model: the lab-tiny GGUF, generated here and placed on rank 0.

A real user stages a checkpoint folder on rank 0 (or downloads one); the
lab does the same with a generated model, so the checkpoint role mirrors it
to the other ranks as it would any staged folder.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkplay.lab import dockercli, tiny_gguf

MODEL_ROOT = "/var/lib/sparkplay/models"
FOLDER = f"{MODEL_ROOT}/lab-tiny"
FILE = "lab-tiny.gguf"


def cached_model(cache: Path) -> tuple[Path, str]:
    """The generated model in `cache` (written once; seeded, so always the same bytes) and its sha256."""
    path = cache / FILE
    if not path.is_file():
        tiny_gguf.write(path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def stage(container: str, cache: Path) -> str | None:
    """Place the model in rank 0's staged folder unless the same bytes are there; say what happened."""
    path, digest = cached_model(cache)
    there = dockercli.docker(["exec", container, "sha256sum", f"{FOLDER}/{FILE}"], check=False)
    if there.returncode == 0 and there.stdout.split()[:1] == [digest]:
        return None
    dockercli.docker(["exec", container, "mkdir", "-p", FOLDER])
    dockercli.docker(["cp", str(path), f"{container}:{FOLDER}/{FILE}"])
    return f"lab-tiny model staged on {container}:{FOLDER} (sha256 {digest[:12]})"
