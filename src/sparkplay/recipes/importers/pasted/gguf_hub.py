"""llama.cpp's `-hf <user>/<model>[:quant]`: which files of the repository it serves, by llama.cpp's own rule.

llama-server resolves the flag itself at start (common/download.cpp): the repository's file list at its
main commit, then the first model GGUF (not mmproj, imatrix or a draft sidecar) whose name holds the tag
followed by `.` or `-` (any case), the first part of a split model and all its parts; without a tag
Q4_K_M, then Q8_0, then the first model GGUF. `--hf-file` names the file instead (any case). Its vision
projector (the best `mmproj` file beside the model, closest in bits) comes too unless `--no-mmproj`.

sparkplay applies the same rule once, at import, to the file list of a pinned commit: the checkpoint
downloads exactly those files, every rank verifies them, and the engine gets `-m`/`--mmproj` paths in
the mirror (no rank ever downloads on its own).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sparkplay import checkpoints
from sparkplay.errors import BadInput

DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
SIDECARS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.I)
TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.I)

# (repo, revision or None) -> (commit, paths in the hub's listing order); the hub in use, tests swap it
Lister = Callable[[str, "str | None"], "tuple[str, list[str]]"]


@dataclass(frozen=True)
class Choice:
    commit: str
    model: str  # the first (or only) file llama.cpp opens
    files: tuple[str, ...]  # every file to download: the model's parts, then the projector
    mmproj: str | None


def split_repo_tag(text: str) -> tuple[str, str]:
    """'org/name:Q4_K_M' -> ('org/name', 'Q4_K_M'); the tag is what follows the last colon."""
    repo, _, tag = text.rpartition(":") if ":" in text else (text, "", "")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise BadInput(f"-hf {text!r} is not <user>/<model>[:quant]", "write the repository as org/name")
    return repo, tag


def _split(path: str) -> tuple[str, str, int, int]:
    """(prefix with the tag, tag upper-cased, part index, part count) of a .gguf path."""
    prefix = path[: -len(".gguf")]
    index = count = 1
    if m := SPLIT.match(prefix):
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    tag = m.group(1).upper() if (m := TAG.search(prefix)) else ""
    return prefix, tag, index, count


def _bits(path: str) -> int:
    digits = re.search(r"[0-9]+", _split(path)[1])
    return int(digits.group(0)) if digits else 0


def is_model(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path.endswith(".gguf") and not any(s in name for s in SIDECARS)


def _first_part(path: str) -> bool:
    _, _, index, count = _split(path)
    return count <= 1 or index == 1


def _parts(files: Sequence[str], primary: str) -> list[str]:
    prefix, _, _, count = _split(primary)
    if count <= 1:
        return [primary]
    return [f for f in files if f.endswith(".gguf") and _split(f)[0] == prefix and _split(f)[3] == count]


def _projector(files: Sequence[str], model: str) -> str | None:
    """The mmproj file beside the model: deepest shared folder, then closest quantisation bits."""
    folder = model.split("/")[:-1]
    best: tuple[int, int] | None = None
    found = None
    for f in files:
        if not f.endswith(".gguf") or "mmproj" not in f:
            continue
        parts = f.split("/")[:-1]
        if parts != folder[: len(parts)]:
            continue
        rank = (-len(parts), abs(_bits(f) - _bits(model)))
        if best is None or rank < best:
            best, found = rank, f
    return found


def choose(files: Sequence[str], tag: str, hf_file: str | None = None) -> tuple[str, list[str]]:
    """(the model file, its parts) llama.cpp picks from a repository's file list."""
    if hf_file:
        primary = next((f for f in files if f.lower() == hf_file.lower()), None)
        if primary is None:
            raise BadInput(f"--hf-file {hf_file} is not in the repository", "name one of its .gguf files")
    else:
        primary = None
        for t in [tag] if tag else DEFAULT_TAGS:
            pattern = re.compile(re.escape(t) + r"[.-]", re.I)
            primary = next((f for f in files if is_model(f) and pattern.search(f) and _first_part(f)), None)
            if primary:
                break
        if primary is None and not tag:
            primary = next((f for f in files if is_model(f) and _first_part(f)), None)
        if primary is None:
            available = ", ".join(f for f in files if f.endswith(".gguf")) or "none"
            raise BadInput(
                f"no GGUF file for the tag {tag or 'default'!r} in the repository (its GGUF files: {available})",
                "name a tag that one of them carries, e.g. repo:Q8_0",
            )
    return primary, _parts(files, primary)


def resolve(hub: str, hf_file: str | None, revision: str | None, mmproj: bool, lister: Lister) -> Choice:
    repo, tag = split_repo_tag(hub)
    commit, files = lister(repo, revision)
    model, parts = choose(files, tag, hf_file)
    projector = _projector(files, model) if mmproj else None
    return Choice(commit, model, (*parts, *([projector] if projector else [])), projector)


def hub_lister(repo: str, revision: str | None) -> tuple[str, list[str]]:
    """The commit of `revision` (main when None) and its files, in the hub's own order (huggingface_hub)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)  # a mirror the user names, read at each call
    try:
        commit = api.model_info(repo, revision=revision).sha or ""
        entries = api.list_repo_tree(repo, revision=commit, recursive=True)
        files = [e.path for e in entries if getattr(e, "size", None) is not None]
    except Exception as exc:  # the hub's errors are many; any of them means the list is not known
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        fix = "import where the hub answers, or --set model.path=<file in the repository>"
        raise BadInput(f"cannot list {repo}@{revision or 'main'} on the Hugging Face hub ({first})", fix) from None
    return commit, files


LISTER: Lister = hub_lister  # the hub itself; tests put a double here (no test reaches the hub)


def apply(doc: dict[str, Any]) -> None:
    """A llama.cpp recipe that serves `-hf repo[:quant]` and names no file: model.path, the projector and the
    target checkpoint's files and commit, from the repository's file list at one commit."""
    model = doc["model"]
    gguf = model.get("gguf")
    if not gguf:  # none is named from the hub (only an engine spec's gguf names one)
        return
    if gguf.get("draft_ref") and not gguf.get("draft"):
        _apply_draft(doc, gguf)
    if not gguf.get("ref") or model.get("path"):
        return
    repo, _ = split_repo_tag(gguf["ref"])
    target = next((c for c in model.get("checkpoints") or [] if c["role"] == "target" and c["repo"] == repo), None)
    if target is None:
        target = {
            "role": "target",
            "repo": repo,
            "revision": model.get("revision"),
            "size_bytes": None,
            "mount": None,
            "license": None,
        }
        model.setdefault("checkpoints", []).insert(0, target)
    choice = resolve(gguf["ref"], gguf["file"], target.get("revision") or model.get("revision"), gguf["mmproj"], LISTER)
    folder = checkpoints.checkpoint_folder(repo)
    model["path"] = f"{folder}/{choice.model}"
    gguf["projector"] = f"{folder}/{choice.mmproj}" if choice.mmproj else None
    pinned = target.get("revision") or model.get("revision")
    target["revision"] = model["revision"] = choice.commit
    target["files"] = list(choice.files)
    rule = f"llama.cpp's -hf rule on {repo}'s files at {choice.commit[:12]}"
    notes = [
        (
            "model.path",
            "derived",
            f"{rule}: {choice.model}"
            + (f" ({len(choice.files) - bool(choice.mmproj)} parts)" if len(choice.files) > 2 else ""),
        ),
        ("model.checkpoints[0].files", "derived", f"only {', '.join(choice.files)} are downloaded"),
    ]
    if choice.mmproj:
        notes.append(
            (
                "model.gguf.projector",
                "derived",
                f"llama.cpp loads the vision projector {choice.mmproj} "
                "with -hf (the recipe has no --no-mmproj): passed as --mmproj",
            )
        )
    if not pinned:
        notes.append(
            (
                "model.revision",
                "pinned",
                f"{repo} at main is {choice.commit}: the commit whose files "
                "were chosen, so every run serves the same ones",
            )
        )
    doc.setdefault("provenance", []).extend({"key": k, "how": how, "detail": d} for k, how, d in notes)


def _apply_draft(doc: dict[str, Any], gguf: dict[str, Any]) -> None:
    """-hfd repo[:quant]: the draft model's files by the same rule (no projector), as the drafter checkpoint."""
    repo, _ = split_repo_tag(gguf["draft_ref"])
    ckpts = doc["model"].setdefault("checkpoints", [])
    drafter = next((c for c in ckpts if c["repo"] == repo and c["role"] == "drafter"), None)
    if drafter is None:
        drafter = {
            "role": "drafter",
            "repo": repo,
            "revision": None,
            "size_bytes": None,
            "mount": None,
            "license": None,
        }
        ckpts.append(drafter)
    choice = resolve(gguf["draft_ref"], None, drafter.get("revision"), False, LISTER)
    gguf["draft"] = f"{checkpoints.checkpoint_folder(repo)}/{choice.model}"
    drafter["revision"], drafter["files"] = choice.commit, list(choice.files)
    doc.setdefault("provenance", []).append(
        {
            "key": "model.gguf.draft",
            "how": "pinned",
            "detail": (
                f"llama.cpp's -hf rule on the draft {repo}'s files at {choice.commit[:12]}: {choice.model}, "
                "served as -md from the mirror"
            ),
        }
    )
