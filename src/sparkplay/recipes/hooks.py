"""sparkrun's pre_exec hooks: shell commands run in every rank's engine container before the engine (sparkrun's
orchestration/hooks.py: each string by `docker exec <container> bash -c '<cmd>'`, in order, the first failure
stopping the launch; the recipe's own entries before its mods'). sparkplay carries them as one privileged request:
rendered as sparkrun renders them (`{key}` from the recipe's defaults and model, an unknown `{...}` left as it is),
pinned by a sha256 over the commands, shown at import, run only where the inventory allows `pre_exec:<recipe>@<sha256>`.

A `copy` entry (a file from the control machine, `docker cp`) has no place here: sparkplay reads no file from the
machine it runs on for a recipe. A recipe with one keeps its pre_exec not honoured, and the import says why.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

MAX_COMMANDS = 64
MAX_CHARS = 8192
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def digest(commands: list[str]) -> str:
    """sha256 over the commands, each length-prefixed: what the pre_exec is."""
    h = hashlib.sha256()
    for command in commands:
        body = command.encode()
        h.update(f"{len(body)}\0".encode() + body)
    return h.hexdigest()


def render(command: str, values: dict[str, Any]) -> str:
    """sparkrun's hook rendering: `{key}` replaced from the values until nothing changes; unknown keys stay."""
    for _ in range(10):
        rendered = PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), command)
        if rendered == command:
            break
        command = rendered
    return command


def read(entries: Any, values: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The recipe's pre_exec as {commands, sha256}; or None and why it stays not honoured."""
    if not entries:
        return None, ""
    if not isinstance(entries, list):
        return None, "pre_exec must be a list of commands"
    if any(isinstance(e, dict) for e in entries):
        return None, (
            "a `copy` entry copies a file from the control machine into the container; sparkplay reads "
            "no file from the machine it runs on for a recipe: put the file in a mod"
        )
    if not all(isinstance(e, str) for e in entries):
        return None, "a pre_exec entry is neither a command nor a copy"
    commands = [render(e, values) for e in entries]
    if len(commands) > MAX_COMMANDS or any(len(c) > MAX_CHARS or "\0" in c for c in commands):
        return None, f"more than {MAX_COMMANDS} commands, or one over {MAX_CHARS} characters"
    return {"commands": commands, "sha256": digest(commands)}, ""
