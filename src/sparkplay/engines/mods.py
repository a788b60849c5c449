"""A recipe's mods in the launch plan: written onto every rank, copied into the engine's container and run
there before the engine, in the recipe's order, as sparkrun runs them (core/mods.py: the folder copied to
/workspace/mods/<name>, then `export WORKSPACE_DIR=$PWD && cd <it> && chmod +x run.sh && ./run.sh`).

Each is a privileged request the boundary shows and the inventory allows by name (mod:<name>); here its
sha256 is recomputed from the bytes the recipe holds, so what runs is what the import showed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline
from sparkplay.recipes import mods as recipe_mods

# where the rank's mod folders are mounted, read-only, in the engine's container
MOUNT = "/sparkplay/mods"
# the container's entrypoint while mods run: a POSIX shell, which every engine image has
SHELL = "/bin/sh"
# copy each mounted mod (numbered in the recipe's order) to sparkrun's place, run it, then become the engine
WRAPPER = (
    "set -e; for m in " + MOUNT + '/*/; do n=$(basename "$m"); d="/workspace/mods/${n#*-}"; rm -rf "$d"; '
    'mkdir -p /workspace/mods; cp -R "$m" "$d"; '
    '(export WORKSPACE_DIR="$PWD"; cd "$d" && chmod +x run.sh && ./run.sh); done; exec "$0" "$@"'
)


def verified(recipe: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The recipe's mods, each hash recomputed from the bytes it holds (an edited mod is refused, named)."""
    found = list(recipe["engine"].get("mods") or [])
    for mod in found:
        # the files are written as root on every rank: a name or path that leaves the mod's folder is an attack
        if not recipe_mods.NAME.match(str(mod["name"])):
            raise BadInput(f"mod name {mod['name']!r} is not a plain name", "re-import the recipe")
        for f in mod["files"]:
            parts = str(f["path"]).split("/")
            if not f["path"] or any(p in ("", ".", "..") for p in parts) or any(ord(c) < 32 for c in f["path"]):
                raise BadInput(f"mod {mod['name']}: the file path {f['path']!r} leaves the mod's folder",
                               "re-import the recipe (the import reads a mod's own files only)")  # fmt: skip
        if recipe_mods.digest(mod["files"]) != mod["sha256"]:
            raise BadInput(f"mod {mod['name']}: its files do not hash to the sha256 the recipe pins",
                           "re-import the recipe (the import reads and pins its mods again)")  # fmt: skip
        if not any(f["path"] == "run.sh" for f in mod["files"]):
            raise BadInput(f"mod {mod['name']} has no run.sh", "re-import the recipe from its registry checkout")
    return found


def apply(plan: dict[str, Any], recipe: Mapping[str, Any], runtime: str, state_dir: str) -> None:
    """Every rank runs the mods before its engine: their files in the plan (the serve role writes them), a
    read-only mount, and the entrypoint wrapped by the shell that runs them. Only a container has mods."""
    found = verified(recipe)
    if not found:
        return
    if runtime != "docker":
        raise BadInput(f"the recipe's mods ({', '.join(m['name'] for m in found)}) patch the engine's container; "
                       "the native runtime has none", "use the docker runtime, or import without the mods")  # fmt: skip
    folder = f"{state_dir.rstrip('/')}/mods/{recipe_mods.digest(f for m in found for f in _files(m))[:16]}"
    subfolders = {f"{folder}/{i:02d}-{m['name']}/{f['path']}".rsplit("/", 1)[0] for i, m in enumerate(found)
                  for f in m["files"]}  # fmt: skip
    plan["directories"] = [*plan.get("directories", []), folder, *sorted(subfolders)]
    for rank in plan["ranks"]:
        options = list(rank["container_options"])
        entry = cmdline.flag_value(options, "--entrypoint")
        if not entry:
            raise BadInput(f"the recipe's mods need the {plan.get('engine') or 'engine'}'s entrypoint, which its "
                           "image chooses here", "import without the mods")  # fmt: skip
        at = options.index("--entrypoint")
        options[at + 1] = SHELL
        rank["container_options"] = options
        rank["argv"] = ["-c", WRAPPER, entry, *rank["argv"]]
        rank["mounts"] = [*rank["mounts"], {"source": folder, "target": MOUNT, "readonly": True}]
        written = [{"path": f"{folder}/{i:02d}-{m['name']}/{f['path']}", "content": f["text"], "mode": f["mode"]}
                   for i, m in enumerate(found) for f in m["files"]]  # fmt: skip
        rank["files"] = [*rank["files"], *written]


def _files(mod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A mod's files under its own name, so two mods' folders hash apart."""
    return [{**f, "path": f"{mod['name']}/{f['path']}"} for f in mod["files"]]
