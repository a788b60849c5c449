"""Which checkpoints a deployment needs on every rank, and where they live."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.nodetools.ckpt.common import MARKER


def absolute(value: Any, key: str) -> str:
    """A node path as every rank uses it: absolute, no '..', no trailing slash (the one rule for paths)."""
    text = str(value)
    if not text.startswith("/") or ".." in text.split("/") or "\n" in text:
        raise BadInput(f"{key} {text!r} is not an absolute path", f"set {key} to an absolute path without '..'")
    return text.rstrip("/") or "/"


def _under(model_root: str, name: str) -> str:
    return f"{absolute(model_root, 'sparkplay_model_root').rstrip('/')}/{name}"


def checkpoint_folder(repo: str) -> str:
    """A Hugging Face repo's folder under the model root: <org>--<name>."""
    org, _, name = repo.partition("/")
    return f"{org}--{name}"


def checkpoint_dir(model_root: str, repo: str) -> str:
    """Where a Hugging Face repo's checkpoint lives on every rank: <root>/<org>--<name>."""
    return _under(model_root, checkpoint_folder(repo))


def model_dir(model_root: str, model: Mapping[str, Any], path_is_folder: bool = False) -> str | None:
    """The folder of the served model on every rank (where its tokenizer.json is, when it has one): a
    relative model.path's folder under the root (llama.cpp's GGUF file; the path itself where the engine
    serves a folder, `path_is_folder`), else the repo's checkpoint folder (an absolute model.path is a
    path inside the engine's container)."""
    path, repo = str(model.get("path") or ""), model.get("repo")
    if path and not path.startswith("/"):
        if ".." in path.split("/"):
            raise BadInput(f"model.path {path!r} points outside the model root", "give a path inside the model root")
        if path_is_folder and any(part in ("", ".") for part in path.rstrip("/").split("/")):
            # a folder the engine serves and the checkpoint role mirrors: never the root itself, nor a spelling
            # of a folder that is not the one the name says
            raise BadInput(f"model.path {path!r} is not a folder below the model root", "name the model's own folder")
        folder = path.rstrip("/") if path_is_folder else posixpath.dirname(path)
        return _under(model_root, folder) if folder else absolute(model_root, "sparkplay_model_root")
    return checkpoint_dir(model_root, str(repo)) if repo else None


def overlay_dir(model_root: str, mount: str) -> str:
    """Where a recipe's overlay lives on every rank: <root>/<last name of its container mount>."""
    name = posixpath.basename(mount.rstrip("/"))
    if name in ("", ".", ".."):
        raise BadInput(
            f"model.overlay.mount {mount!r} names no folder", "give the overlay's container path, e.g. /models/overlay"
        )
    return _under(model_root, name)


def sources(
    recipe: Mapping[str, Any],
    model_root: str,
    extra: Sequence[Mapping[str, Any]] = (),
    lock: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The recipe's checkpoints (Hugging Face repos) plus staged folders, normalised.

    Each: name, kind (hf|staged), repo, revision (pinned, else from the lock,
    else None to resolve once), dest (same absolute path on every rank),
    size_bytes (if known).
    """
    lock = lock or {}
    found: list[dict[str, Any]] = []
    for ckpt in (recipe.get("model") or {}).get("checkpoints") or []:
        dest = checkpoint_dir(model_root, ckpt["repo"])
        folder = posixpath.basename(dest)
        found.append(
            {
                "name": folder,
                "kind": "hf",
                "repo": ckpt["repo"],
                "revision": ckpt.get("revision") or lock.get(ckpt["repo"]),
                "pinned": bool(ckpt.get("revision")),
                "dest": dest,
                "size_bytes": ckpt.get("size_bytes"),
                "files": list(ckpt["files"]) if ckpt.get("files") else None,  # a GGUF variant: those alone
            }
        )
    for item in extra:
        if "staged" not in item or "name" not in item:
            raise ValueError(f"a staged checkpoint needs name and staged (a folder on rank 0): {dict(item)}")
        found.append(
            {
                "name": item["name"],
                "kind": "staged",
                "repo": None,
                "revision": str(item.get("revision") or "staged"),
                "pinned": True,
                "dest": str(item["staged"]).rstrip("/"),
                "size_bytes": item.get("size_bytes"),
            }
        )
    return found


def fabric_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines of a node's fabric environment (the Deployment's paths.fabric_env)."""
    env = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return env


def fabric_addresses(text: str | None) -> list[str]:
    """The cable addresses a node's fabric environment names (SPARKPLAY_FABRIC_ADDRESSES); none without one."""
    listed = fabric_env(text or "").get("SPARKPLAY_FABRIC_ADDRESSES", "")
    return [address for address in listed.split(",") if address]


def progress_line(host: str, progress: Mapping[str, Any]) -> str:
    """'rank1: 1.20 / 3.40 GB (35%), 0.85 GB/s, ETA 3 s' from the mirror's progress file."""
    done, total = progress.get("bytes_done", 0), progress.get("bytes_total", 0) or 1
    rate = progress.get("rate_bps", 0) or 0
    eta = progress.get("eta_s")
    eta_text = "-" if eta is None else f"{eta:.0f} s" if eta < 120 else f"{eta / 60:.1f} min"
    share = f"{done / 1e9:.2f} / {total / 1e9:.2f} GB ({100 * done / total:.0f}%)"
    return f"{host}: {share}, {rate / 1e9:.2f} GB/s, ETA {eta_text}"


def sync_progress(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The status a `sparkplay-ckpt progress` task printed, while its sync moves bytes; else None."""
    text = result.get("stdout")
    if not isinstance(text, str) or not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) and "bytes_total" in data and not data.get("finished") else None


def offline_marker(checkpoint: dict[str, Any]) -> str:
    """What shows a checkpoint is on the leader: a staged folder itself, a download's completion marker."""
    dest = str(checkpoint["dest"])
    return dest if checkpoint.get("kind") == "staged" else f"{dest}/{MARKER}"


def offline_model(checkpoint: dict[str, Any]) -> str:
    """How a missing checkpoint would be fetched, for the offline list."""
    if checkpoint.get("kind") == "staged":
        return f"model {checkpoint.get('name')}: its staged folder {checkpoint.get('dest')} is missing"
    revision = checkpoint.get("revision") or "main"
    return f"model {checkpoint.get('repo')}@{revision} (Hugging Face download)"


def served_folders(doc: Mapping[str, Any]) -> list[str]:
    """Where its engine reads: its model's folder, its recipe's checkpoints (a drafter's too), its overlay."""
    folders = [str(c["dest"]) for c in doc.get("checkpoints") or [] if c.get("kind") == "hf"]
    if (doc.get("model") or {}).get("dir"):
        folders.append(str(doc["model"]["dir"]))
    if doc.get("overlay"):
        folders.append(str(doc["overlay"]["output"]))
    return sorted(set(folders))
