"""The controller's side of the managed-files rule: every node's foreign files, in one list.

The rule itself (which file on a node is sparkplay's, the registry of what
it wrote) runs on the node: plugins/module_utils/sparkplay_managed.py,
through the module sparkplay_managed_files.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

from sparkplay.boundary import SYSTEM_FOLDERS, SYSTEM_TREES, inside

# the facts in which roles note, before anything changes, the files they would write that sparkplay did not
# write: the managed_files role's probe, and the roles that probe in their own one call (sparkplay_probe)
FOREIGN_FACTS = ("managed_files_foreign", "fabric_foreign", "peer_ssh_foreign", "serve_foreign")


def foreign_report(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """'host: path' for every foreign file noted on any of `hosts` (each once)."""
    lines: list[str] = []
    for host in hosts:
        for fact in FOREIGN_FACTS:
            lines += [f"{host}: {p}" for p in hostvars[host].get(fact) or [] if f"{host}: {p}" not in lines]
    return lines


def reset_removable(entries: Iterable[Mapping[str, Any]], keep: Iterable[str]) -> list[Mapping[str, Any]]:
    """The entries of sparkplay's state folder that reset may remove: none that is, or holds, a folder to
    keep (the model root), and none inside one (a state folder that is the model root itself holds the
    checkpoints), compared after normalising (`/models/`, `//models` and `/models/.` are one)."""
    kept = [posixpath.normpath("/" + str(k).lstrip("/")) for k in keep if str(k)]
    removable = []
    for entry in entries:
        path = posixpath.normpath("/" + str(entry["path"]).lstrip("/"))
        if not any(path == k or k.startswith(path.rstrip("/") + "/") or inside(path, [k]) for k in kept):
            removable.append(entry)
    return removable


def reset_state_dirs(recorded: Iterable[Any], default: str) -> list[str]:
    """The state folders reset empties: the default and each one a rank's serve record names (serve_state_dir
    moved it), normalised, never a system folder or one inside the system's trees, whoever wrote it."""
    found: list[str] = []
    for path in [default, *recorded]:
        if not isinstance(path, str) or not path.startswith("/"):
            continue
        norm = posixpath.normpath("/" + path.lstrip("/"))
        if norm not in SYSTEM_FOLDERS and not inside(norm, SYSTEM_TREES) and norm not in found:
            found.append(norm)
    return found
