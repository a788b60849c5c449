"""Where a recipe's model comes from, as its command says: the file an engine serves, the hub repository
(a hub-cache snapshot path, the recipe's own model field), the revision the engine's flag pins, the
draft model and the other checkpoints the recipe needs; each derived value noted on the RawRecipe."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from sparkplay import argv, checkpoints
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes.raw import RawRecipe

REPO_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*\Z")


# what a model that is no repository may be: a path or a file name (no blank, quote or shell sign: a text's
# `vllm serve 'org/m; rm -rf /'` is neither a model nor a path)
PATH_PATTERN = re.compile(r"^[A-Za-z0-9_./:@+=,~%-]+\Z")


def check_path(model: str) -> None:
    if not PATH_PATTERN.match(model):
        bad = next((c for c in model if not PATH_PATTERN.match(c)), "")
        raise BadInput(
            f"the model {model!r} is neither a Hugging Face repository (org/name) nor a path ({bad!r} is in no path "
            "a recipe serves)",
            "give the model's repository (org/name) or its file or folder under the model root",
        )


def model_file(raw: RawRecipe, repo: str | None) -> str | None:
    """llama.cpp's -m: a file under the model root. An absolute path is the recipe author's own disk (or
    container); with the repository known, the file of that name in its mirrored checkpoint is meant."""
    path = raw.model
    spec = registry.spec(raw.engine)
    if path and path.startswith("/") and not repo and spec.serves_local_path:
        return _staged(raw, path, spec.model_is_file)
    if not spec.model_is_file or not path or not path.startswith("/") or not repo:
        return path
    mapped = f"{checkpoints.checkpoint_folder(repo)}/{posixpath.basename(path)}"
    raw.note(
        "model.path",
        "cleaned",
        f"{path} is a path on the recipe author's machine; the file of that name "
        f"in the {repo} checkpoint is used ({mapped} under the model root)",
    )
    return mapped


def _staged(raw: RawRecipe, path: str, is_file: bool) -> str:
    """A model the text serves from a folder (or file) on its writer's machine, with no repository named: the
    folder of that name under the model root, staged on rank 0 and mirrored to every rank (a file: in a folder
    named as the one it was in). A path with no name in it is left to the plan to refuse."""
    normal = posixpath.normpath(path)
    name, parent = posixpath.basename(normal), posixpath.basename(posixpath.dirname(normal))
    if name in ("", ".", "..") or name.startswith(".") or (is_file and parent in ("", ".", "..")):
        return path
    mapped = f"{parent}/{name}" if is_file else name
    raw.note(
        "model.path",
        "cleaned",
        f"{path} is a {'file' if is_file else 'folder'} on the machine the text was written for, and no repository "
        f"is named: sparkplay serves {mapped} under the model root, which rank 0 must hold ("
        + ("the engine's other ranks get its weights from rank 0" if is_file else "mirrored to every rank, verified")
        + "); put the model there, or name its repository to download it: --set model.repo=ORG/NAME",
    )
    return mapped


def revision_flag(raw: RawRecipe, repo: str | None) -> None:
    """The revision the engine's own flag asks for pins the download (the plan then serves the mirror of it)."""
    flag = registry.spec(raw.engine).revision_flag
    stated = argv.flag_value(raw.args, flag) if flag else None
    if stated is None or not repo:
        return
    if raw.revision not in (None, stated):
        raise BadInput(
            f"the engine's {flag} {stated} and the recipe's model revision {raw.revision} differ", "make them the same"
        )
    if raw.revision is None:
        raw.revision = stated
        raw.note(
            "model.revision",
            "derived",
            f"the engine's {flag} {stated}: the download is pinned to it, and "
            "the engine serves that revision from the mirror (the plan drops the flag)",
        )


def checkpoint(role: str, repo: str, revision: str | None) -> dict[str, Any]:
    return {"role": role, "repo": repo, "revision": revision, "size_bytes": None, "mount": None, "license": None}


HF_CACHE_PATH = re.compile(r"models--([^/]+)--([^/]+)/snapshots/([0-9a-f]{40})")


def draft_source(draft: str) -> tuple[str, str | None] | None:
    """The hub repository (and pinned revision, if the name carries one) a draft model comes from.

    A repository name (org/name) is one; so is a Hugging Face cache snapshot
    path (.../models--org--name/snapshots/<commit>), which pins the commit.
    Anything else is a local path sparkplay cannot fetch.
    """
    if REPO_PATTERN.match(draft):
        return draft, None
    if ":" in draft and REPO_PATTERN.match(draft.rsplit(":", 1)[0]):  # llama.cpp's repo:quant (-hfd)
        return draft.rsplit(":", 1)[0], None
    if match := HF_CACHE_PATH.search(draft):
        return f"{match.group(1)}/{match.group(2)}", match.group(3)
    return None


def served_path_repo(raw: RawRecipe, repo: str | None) -> str | None:
    """The repository behind a command that serves a local path: a hub-cache snapshot path names (and pins)
    it, else the recipe's own model field does. Either way the import says so: sparkplay serves that
    repository's checkpoint, mirrored to every rank, at its own path."""
    snapshot = HF_CACHE_PATH.search(raw.model or "")
    if snapshot:
        repo, commit = f"{snapshot.group(1)}/{snapshot.group(2)}", snapshot.group(3)
        if raw.revision not in (None, commit):
            raise BadInput(
                f"the command serves {repo} at commit {commit} but the recipe pins {raw.revision}", "make them the same"
            )
        raw.revision = commit
        raw.note(
            "model.repo",
            "derived",
            f"the command serves the hub-cache snapshot {raw.model}: {repo} at that "
            "commit, downloaded and mirrored by sparkplay and served from the model root",
        )
    elif repo:
        raw.note(
            "model.repo",
            "derived",
            f"the command serves the local path {raw.model}; the recipe names the "
            f"model {repo}, which sparkplay downloads, mirrors and serves from the model root",
        )
    return repo


def add_other_models(raw: RawRecipe, doc: dict[str, Any]) -> None:
    """Every model the recipe needs becomes a checkpoint: the draft its speculative decoding names and the
    other models its source lists. An engine started offline (HF_HUB_OFFLINE=1) cannot fetch them itself."""
    ckpts = doc["model"]["checkpoints"]
    pins = {c["repo"]: c.get("revision") for c in raw.checkpoints}
    draft = (doc["speculative"] or {}).get("draft_model")
    mounted = any(c.get("mount") and draft.rstrip("/") == c["mount"].rstrip("/") for c in ckpts) if draft else False
    if isinstance(draft, str) and draft and not mounted:  # a mounted checkpoint is already one
        source = draft_source(draft)
        if source is None:
            raw.note(
                "speculative.draft_model",
                "derived",
                f"{draft} is a local path, not a hub repository: "
                "sparkplay cannot fetch it, so it must already exist on every rank",
            )
        elif not any(c["repo"] == source[0] for c in ckpts):
            ckpts.append(checkpoint("drafter", source[0], source[1] or pins.get(source[0])))
            raw.note("model.checkpoints", "derived", f"the draft model {source[0]} named in the engine flags")
    unused = registry.spec(raw.engine).unused_draft(raw.args, doc["speculative"])
    source = draft_source(unused[0]) if unused else None
    if unused and source and not any(c["repo"] == source[0] for c in ckpts):  # mirrored as sparkrun syncs it
        ckpts.append(checkpoint("extra", source[0], source[1] or pins.get(source[0])))
        raw.note(
            "model.checkpoints", "derived", f"the draft model {source[0]} is named, but {unused[1]}: mirrored, not used"
        )
    for other in raw.checkpoints:
        if not any(c["repo"] == other["repo"] for c in ckpts):
            ckpts.append(checkpoint("extra", other["repo"], other.get("revision")))
            raw.note("model.checkpoints", "derived", f"{other['repo']}: a model the recipe's source lists")
