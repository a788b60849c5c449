"""A recipe's pre_exec and mods in the launch plan: written onto every rank, run in the engine's container before
the engine, as sparkrun runs them: the pre_exec commands first (orchestration/hooks.py: each by `bash -c` in the
container's working folder, the first failure stopping the start), then each mod in the recipe's order
(core/mods.py: the folder copied to /workspace/mods/<name>, then `export WORKSPACE_DIR=$PWD && cd <it> &&
chmod +x run.sh && ./run.sh`).

Each is a privileged request the boundary shows and the inventory allows (mod:<name>, pre_exec:<sha12>); here
the sha256 is recomputed from what the recipe holds, so what runs is what the import showed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from sparkplay import argv
from sparkplay.errors import BadInput
from sparkplay.recipes import hooks
from sparkplay.recipes import mods as recipe_mods

# where the rank's mod folders are mounted, read-only, in the engine's container
MOUNT = "/sparkplay/mods"
# the container's entrypoint while mods run: a POSIX shell, which every engine image has
SHELL = "/bin/sh"
# the pre_exec first, then each mounted mod (numbered in the recipe's order) copied to sparkrun's place and run,
# then the engine: through bash when the command line has a preamble (it runs in the shell that starts the engine)
PRE_EXEC, PREAMBLE = "pre_exec.sh", "preamble.sh"
WRAPPER = (
    f"set -e; if [ -f {MOUNT}/{PRE_EXEC} ]; then /bin/sh {MOUNT}/{PRE_EXEC}; fi; "
    "for m in " + MOUNT + '/*/; do [ -d "$m" ] || continue; n=$(basename "$m"); d="/workspace/mods/${n#*-}"; '
    'rm -rf "$d"; mkdir -p /workspace/mods; cp -R "$m" "$d"; '
    '(export WORKSPACE_DIR="$PWD"; cd "$d" && chmod +x run.sh && ./run.sh); done; '
    f'if [ -f {MOUNT}/{PREAMBLE} ]; then exec bash -c \'. {MOUNT}/{PREAMBLE}; exec "$0" "$@"\' "$0" "$@"; fi; '
    'exec "$0" "$@"'
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
                raise BadInput(
                    f"mod {mod['name']}: the file path {f['path']!r} leaves the mod's folder",
                    "re-import the recipe (the import reads a mod's own files only)",
                )
        if recipe_mods.digest(mod["files"]) != mod["sha256"]:
            raise BadInput(
                f"mod {mod['name']}: its files do not hash to the sha256 the recipe pins",
                "re-import the recipe (the import reads and pins its mods again)",
            )
        if not any(f["path"] == "run.sh" for f in mod["files"]):
            raise BadInput(f"mod {mod['name']} has no run.sh", "re-import the recipe from its registry checkout")
    return found


def _pinned(recipe: Mapping[str, Any], kind: str) -> list[str] | None:
    """The recipe's pre_exec or preamble commands, their hash recomputed (an edited command is refused)."""
    found = recipe["engine"].get(kind)
    if not found:
        return None
    commands = [str(c) for c in found["commands"]]
    if hooks.digest(commands) != found["sha256"]:
        raise BadInput(
            f"engine.{kind}: its commands do not hash to the sha256 the recipe pins",
            f"re-import the recipe (the import reads and pins its {kind} again)",
        )
    return commands


def pre_exec_script(recipe: Mapping[str, Any]) -> str | None:
    """The recipe's pre_exec as the script the wrapper runs (each command by bash, in the container's working
    folder, the first failure stopping the start); None when it has none."""
    commands = _pinned(recipe, "pre_exec")
    if commands is None:
        return None
    lines = [
        "# the recipe's pre_exec, as sparkrun runs it: each command by bash, in order; the first failure "
        "stops the start",
        "set -e",
    ]
    return "\n".join([*lines, *(f"bash -c {shlex.quote(c)}" for c in commands)]) + "\n"


def preamble_script(recipe: Mapping[str, Any]) -> str | None:
    """The commands the recipe's command line runs before the engine, as the file the engine's own bash reads
    first (sparkrun runs the whole command line in one bash); None when it has none."""
    commands = _pinned(recipe, "preamble")
    if commands is None:
        return None
    return (
        "\n".join(
            ["# the recipe's command line before its engine; the first failure stops the start", "set -e", *commands]
        )
        + "\n"
    )


def apply(plan: dict[str, Any], recipe: Mapping[str, Any], runtime: str, state_dir: str) -> None:
    """Every rank runs the pre_exec and the mods before its engine: their files in the plan (the serve role writes
    them), a read-only mount, and the entrypoint wrapped by the shell that runs them. Only a container has them."""
    found = verified(recipe)
    script, preamble = pre_exec_script(recipe), preamble_script(recipe)
    if not found and script is None and preamble is None:
        return
    if runtime != "docker":
        kinds = [*(["pre_exec"] if script else []), *(["preamble"] if preamble else [])]
        what = ", ".join([*kinds, *(f"mod {m['name']}" for m in found)])
        raise BadInput(
            f"the recipe's {what} run in the engine's container; the native runtime has none",
            "use the docker runtime, or import without them",
        )
    relative = [{**f, "path": f"{i:02d}-{m['name']}/{f['path']}"} for i, m in enumerate(found) for f in m["files"]]
    if script is not None:
        relative.append({"path": PRE_EXEC, "text": script, "mode": "0644"})
    if preamble is not None:
        relative.append({"path": PREAMBLE, "text": preamble, "mode": "0644"})
    folder = f"{state_dir.rstrip('/')}/mods/{recipe_mods.digest(relative)[:16]}"
    subfolders = {f"{folder}/{f['path']}".rsplit("/", 1)[0] for f in relative}
    plan["directories"] = [*plan.get("directories", []), folder, *sorted(subfolders - {folder})]
    for rank in plan["ranks"]:
        options = list(rank["container_options"])
        entry = argv.flag_value(options, "--entrypoint")
        if not entry:
            raise BadInput(
                f"the recipe's mods need the {plan.get('engine') or 'engine'}'s entrypoint, which its "
                "image chooses here",
                "import without the mods",
            )
        at = options.index("--entrypoint")
        options[at + 1] = SHELL
        rank["container_options"] = options
        rank["argv"] = ["-c", WRAPPER, entry, *rank["argv"]]
        rank["mounts"] = [*rank["mounts"], {"source": folder, "target": MOUNT, "readonly": True}]
        written = [{"path": f"{folder}/{f['path']}", "content": f["text"], "mode": f["mode"]} for f in relative]
        rank["files"] = [*rank["files"], *written]
