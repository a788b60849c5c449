"""sparkrun's mods: a folder with a run.sh (and the patches it applies) run in the engine's container before
the engine starts, as root there. sparkplay carries them as privileged requests.

Found as sparkrun finds them (core/mods.py, read for this): a leading `mods/` is dropped, then the folder
beside the recipe file (`<dir>/<ref>`, `<dir>/mods/<ref>`), then the mods folder of the registry checkout
the recipe is in (`.sparkrun/registry.yaml`, an entry's `mods` subpath), then the folders the import is
given (`--mods-from`: sparkrun's last resort is eugr's registry, whose mods many registries use).
`@registry/...` references need a registry sparkplay does not clone: not found, and said so.

A mod is read whole into the recipe (UTF-8 text files only: scripts and patches), pinned by a sha256 over
its paths, modes and bytes, shown at import, and run only where the inventory allows `mod:<name>`
(serve_allow); the plan recomputes the hash from the bytes before it uses them.
"""

from __future__ import annotations

import hashlib
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from sparkplay.errors import BadInput

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
MAX_FILES = 64
MAX_BYTES = 512 * 1024
REGISTRY_FILE = Path(".sparkrun") / "registry.yaml"


def digest(files: Iterable[Mapping[str, Any]]) -> str:
    """sha256 over each file's path, mode and bytes, in path order: what a mod is."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f["path"]):
        body = f["text"].encode()
        h.update(f"{f['path']}\0{f['mode']}\0{len(body)}\0".encode() + body)
    return h.hexdigest()


def _normal(ref: str) -> str | None:
    """The reference as a relative folder path (`mods/` dropped), or None for what cannot be one here."""
    ref = ref.removeprefix("mods/").strip("/")
    parts = ref.split("/")
    if ref.startswith("@") or not ref or any(p in ("", ".", "..") for p in parts):
        return None
    return ref


def _registry_mods(recipe_file: Path) -> list[Path]:
    """The mods folders of the registry checkout the recipe file is in (nearest .sparkrun/registry.yaml)."""
    for folder in list(recipe_file.parents)[:6]:
        config = folder / REGISTRY_FILE
        if config.is_file():
            try:
                data = yaml.safe_load(config.read_text())
            except (OSError, yaml.YAMLError):
                return []
            entries = data.get("registries") if isinstance(data, dict) else None
            found = []
            for entry in entries if isinstance(entries, list) else []:
                sub = entry.get("mods") if isinstance(entry, dict) else None
                recipes = entry.get("recipes") if isinstance(entry, dict) else None
                if isinstance(sub, str) and _normal(sub):
                    mine = isinstance(recipes, str) and (folder / recipes) in recipe_file.parents
                    found.insert(0 if mine else len(found), folder / sub)
            return found
    return []


def find(ref: str, recipe_file: Path | None, extra: Iterable[Path] = ()) -> tuple[Path | None, list[str]]:
    """The mod folder (one with a run.sh) a reference names, and every place tried: beside the recipe file, its
    registry checkout's mods, then the folders the user names (`--mods-from`: sparkrun's fallback, eugr's)."""
    rel = _normal(ref)
    if rel is None:
        return None, [f"{ref} (a registry reference or not a folder name)"]
    here = [recipe_file.parent, recipe_file.parent / "mods", *_registry_mods(recipe_file)] if recipe_file else []
    bases = [*here, *extra]
    tried = []
    for base in bases:
        candidate = base / rel
        tried.append(str(candidate))
        if (candidate / "run.sh").is_file() and not candidate.is_symlink():
            return candidate, tried
    return None, tried


def read(folder: Path) -> dict[str, Any]:
    """A mod folder as the recipe holds it: {name, sha256, files: [{path, mode, text}]}; refused (ValueError,
    naming why) when it holds a link, a special or binary file, or more than a mod's size."""
    name = folder.name
    if not NAME.match(name):
        raise ValueError(f"the mod folder name {name!r} is not a plain name")
    files, total = [], 0
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        info = path.lstat()
        if stat.S_ISDIR(info.st_mode):
            continue
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{name}/{rel} is a link or a special file")
        total += info.st_size
        if len(files) >= MAX_FILES or total > MAX_BYTES:
            raise ValueError(f"{name} is larger than a mod ({MAX_FILES} files, {MAX_BYTES // 1024} KiB)")
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{name}/{rel} is not UTF-8 text (a mod is scripts and patches)") from None
        if any(ord(c) < 32 and c not in "\t\n\r" for c in rel):
            raise ValueError(f"{name} has a file name with control characters")
        files.append({"path": rel, "mode": "0755" if info.st_mode & 0o111 else "0644", "text": text})
    return {"name": name, "sha256": digest(files), "files": files}


def resolve_all(refs: Any, where: str, mods_from: Sequence[Path] = ()) -> tuple[list[dict[str, Any]], str]:
    """The recipe's mods, read and pinned, when every one is found as sparkrun finds it (a recipe imported from
    a file in a registry checkout); else none and what was missing (the mods stay not honoured, said so)."""
    if not refs or not isinstance(refs, list):
        return [], ""
    local = urlsplit(where).scheme not in ("http", "https") and Path(where).is_file()
    if not local and not mods_from:
        return [], "the recipe was not imported from a file beside its mods, and no --mods-from was given"
    found = []
    for ref in refs:
        folder, tried = find(str(ref), Path(where) if local else None, mods_from)
        if folder is None:
            return [], f"{ref}: tried {', '.join(tried)}"
        try:
            found.append(read(folder))
        except ValueError as exc:
            raise BadInput(f"{where}: mod {ref}: {exc}", "fix the mod, or import without it") from None
    names = [m["name"] for m in found]
    if len(set(names)) != len(names):
        return [], f"two mods are named alike ({', '.join(names)})"
    return found, ""
