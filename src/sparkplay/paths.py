"""Where the Ansible project (ansible.cfg, playbooks, roles, inventory) lives."""

from __future__ import annotations

import os
from pathlib import Path

from sparkplay.errors import BadInput

_MARKERS = ("ansible.cfg", "playbooks")


def _is_project(path: Path) -> bool:
    return all((path / marker).exists() for marker in _MARKERS)


def project_dir(explicit: Path | None = None) -> Path:
    """The project: --project-dir, else $SPARKPLAY_PROJECT_DIR, else the nearest
    one above the working directory, else the checkout this package runs from."""
    chosen = explicit or (
        Path(os.environ["SPARKPLAY_PROJECT_DIR"]) if os.environ.get("SPARKPLAY_PROJECT_DIR") else None
    )
    if chosen is not None:
        if not _is_project(chosen):
            raise BadInput(
                f"{chosen} is not a sparkplay project (no ansible.cfg and playbooks/)",
                "pass the folder of your sparkplay checkout with --project-dir",
            )
        return chosen.resolve()
    for candidate in (Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents):
        if _is_project(candidate):
            return candidate
    raise BadInput(
        "no sparkplay project found above the working directory",
        "run from your sparkplay checkout or pass --project-dir",
    )
