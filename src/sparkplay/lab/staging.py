"""The lab's staged models, generated here and placed on rank 0: the lab-tiny and lab-small GGUFs, lab-vllm's folder.

A real user stages a checkpoint folder on rank 0 (or downloads one); the
lab does the same with a generated model, so the checkpoint role mirrors it
to the other ranks as it would any staged folder.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkplay.fsutil import atomic_write
from sparkplay.lab import dockercli, tiny_gguf, tiny_hf
from sparkplay.settings import DEFAULTS

MODEL_ROOT = DEFAULTS["sparkplay_model_root"]
FOLDER = f"{MODEL_ROOT}/lab-tiny"
FILE = "lab-tiny.gguf"
TOKENIZER = "tokenizer.json"  # beside the model, as in a Hugging Face checkpoint (`sparkplay bench` counts with it)
SMALL_FOLDER = f"{MODEL_ROOT}/lab-small"  # the lab-small recipe's (another size, served beside lab-tiny)
SMALL_FILE = "lab-small.gguf"
HF_FOLDER = f"{MODEL_ROOT}/lab-vllm"  # the lab-vllm recipe's model.path (a folder: vLLM's checkpoint layout)


def cached_model(cache: Path) -> tuple[Path, str]:
    """The generated model in `cache` (written once; seeded, so always the same bytes) and its sha256."""
    path = cache / FILE
    if not path.is_file():
        tiny_gguf.write(path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def cached_small_model(cache: Path) -> tuple[Path, str]:
    """lab-small's GGUF in `cache` (written once; seeded) and its sha256."""
    path = cache / SMALL_FILE
    if not path.is_file():
        tiny_gguf.write(path.with_suffix(".tmp"), **tiny_gguf.SMALL)
        path.with_suffix(".tmp").replace(path)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def cached_tokenizer(cache: Path) -> tuple[Path, str]:
    path, text = cache / TOKENIZER, tiny_gguf.tokenizer_json().encode()
    atomic_write(path, text)
    return path, hashlib.sha256(text).hexdigest()


def cached_hf_model(cache: Path) -> list[tuple[Path, str]]:
    """lab-vllm's checkpoint folder in `cache` (written once; seeded) and each file's sha256."""
    folder = cache / "lab-vllm"
    if not all((folder / name).is_file() for name in tiny_hf.FILES):
        partial = cache / "lab-vllm.partial"
        tiny_hf.write(partial)
        partial.replace(folder)
    for name in tiny_hf.FILES:  # a cache written before the files were made readable
        (folder / name).chmod(0o644)
    return [(folder / name, hashlib.sha256((folder / name).read_bytes()).hexdigest()) for name in tiny_hf.FILES]


def _place(container: str, folder: str, wanted: list[tuple[Path, str]]) -> bool:
    """Copy into the container's `folder` the files whose bytes are not there yet; whether any were."""
    have = dockercli.sha256_in(container, folder, " ".join(path.name for path, _ in wanted))
    missing = [path for path, digest in wanted if have.get(path.name) != digest]
    if missing:
        dockercli.docker(["exec", container, "mkdir", "-p", folder])
    for path in missing:
        dockercli.docker(["cp", str(path), f"{container}:{folder}/{path.name}"])
    return bool(missing)


def stage(container: str, cache: Path) -> str | None:
    """Place both lab models in rank 0's staged folders unless the same bytes are there."""
    tiny = [cached_model(cache), cached_tokenizer(cache)]
    staged = []
    if _place(container, FOLDER, tiny):
        staged.append(f"lab-tiny model staged on {container}:{FOLDER} (sha256 {tiny[0][1][:12]}, with its {TOKENIZER})")
    small = [cached_small_model(cache), cached_tokenizer(cache)]  # the same tokenizer (`sparkplay bench`)
    if _place(container, SMALL_FOLDER, small):
        staged.append(f"lab-small model staged on {container}:{SMALL_FOLDER} (sha256 {small[0][1][:12]})")
    if _place(container, HF_FOLDER, cached_hf_model(cache)):
        staged.append(f"lab-vllm model staged on {container}:{HF_FOLDER}")
    return "; ".join(staged) or None
