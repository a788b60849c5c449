"""Hugging Face: resolve a revision to a commit, download a snapshot (huggingface_hub, on rank 0 only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .common import Failure


def _hub(token_file: Path | None) -> tuple[Any, str | None]:
    try:
        import huggingface_hub
    except ImportError:
        raise Failure("huggingface_hub is not installed (the checkpoint role installs it on rank 0)") from None
    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip() or None
        except FileNotFoundError:
            token = None  # no token configured: public repos only
        except OSError as exc:
            raise Failure(f"cannot read the token file {token_file}: {exc.strerror}") from None
    return huggingface_hub, token


def _first_line(exc: Exception) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {text}"


def resolve(repo: str, revision: str | None, token_file: Path | None) -> dict[str, Any]:
    hub, token = _hub(token_file)
    try:
        info = hub.HfApi().model_info(repo, revision=revision, token=token)
    except Exception as exc:
        raise Failure(f"cannot resolve {repo}@{revision or 'main'}: {_first_line(exc)}") from None
    return {"repo": repo, "revision": revision, "commit": info.sha}


def download(
    repo: str, revision: str, dest: Path, token_file: Path | None, offline: bool, files: list[str] | None = None
) -> dict[str, Any]:
    """The repository at `revision` into `dest`; with `files`, those alone (exact names: a GGUF variant)."""
    hub, token = _hub(token_file)
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    # fnmatch patterns: a name's own [, ] and * are escaped so it matches itself and nothing else
    patterns = ["".join(f"[{c}]" if c in "[]*?" else c for c in name) for name in files or []] or None
    try:
        path = hub.snapshot_download(
            repo_id=repo, revision=revision, local_dir=str(dest), token=token, allow_patterns=patterns
        )
    except Exception as exc:
        raise Failure(f"download of {repo}@{revision} failed: {_first_line(exc)}") from None
    files = [p for p in Path(path).rglob("*") if p.is_file() and ".cache" not in p.relative_to(path).parts]
    return {"repo": repo, "revision": revision, "dest": str(path), "files": len(files)}
