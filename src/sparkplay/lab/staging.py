"""The lab's staged model: the lab-tiny GGUF, generated here and placed on rank 0.

A real user stages a checkpoint folder on rank 0 (or downloads one); the
lab does the same with a generated model, so the checkpoint role mirrors it
to the other ranks as it would any staged folder.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkplay.deployment import DEFAULTS
from sparkplay.fsutil import atomic_write
from sparkplay.lab import dockercli, tiny_gguf

MODEL_ROOT = DEFAULTS["sparkplay_model_root"]
FOLDER = f"{MODEL_ROOT}/lab-tiny"
FILE = "lab-tiny.gguf"
TOKENIZER = "tokenizer.json"  # beside the model, as in a Hugging Face checkpoint (`sparkplay bench` counts with it)


def cached_model(cache: Path) -> tuple[Path, str]:
    """The generated model in `cache` (written once; seeded, so always the same bytes) and its sha256."""
    path = cache / FILE
    if not path.is_file():
        tiny_gguf.write(path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def cached_tokenizer(cache: Path) -> tuple[Path, str]:
    path, text = cache / TOKENIZER, tiny_gguf.tokenizer_json().encode()
    atomic_write(path, text)
    return path, hashlib.sha256(text).hexdigest()


def stage(container: str, cache: Path) -> str | None:
    """Place the model and its tokenizer in rank 0's staged folder unless the same bytes are there."""
    wanted = [cached_model(cache), cached_tokenizer(cache)]
    have = dockercli.sha256_in(container, FOLDER, f"{FILE} {TOKENIZER}")
    missing = [(path, digest) for path, digest in wanted if have.get(path.name) != digest]
    if not missing:
        return None
    dockercli.docker(["exec", container, "mkdir", "-p", FOLDER])
    for path, _ in missing:
        dockercli.docker(["cp", str(path), f"{container}:{FOLDER}/{path.name}"])
    return f"lab-tiny model staged on {container}:{FOLDER} (sha256 {wanted[0][1][:12]}, with its {TOKENIZER})"
