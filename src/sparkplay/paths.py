"""Where things live: the Ansible project (code), the user's data (recipes imported, backups, the lab's
inventory, bench results) and caches.

Two layouts, one set of rules:
- a checkout (developers, `make`): the project is the checkout and holds the user's data as today
  (recipes/, inventory/, results/, .cache/);
- an installed wheel (`pipx install sparkplay`): the project ships inside the package (read-only,
  `sparkplay/_project`), and the user's data goes to per-user folders (XDG): $XDG_DATA_HOME/sparkplay
  (recipes imported, backups, the lab inventory, results), $XDG_CACHE_HOME/sparkplay, and the default
  inventory in $XDG_CONFIG_HOME/sparkplay/inventory. $SPARKPLAY_DATA_DIR, $SPARKPLAY_CACHE_DIR and
  $SPARKPLAY_INVENTORY override each.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkplay.errors import BadInput

_MARKERS = ("ansible.cfg", "playbooks")
# the project inside an installed wheel (setup.py's build step copies it there)
BUNDLED = Path(__file__).resolve().parent / "_project"


def _is_project(path: Path) -> bool:
    return all((path / marker).exists() for marker in _MARKERS)


def project_dir(explicit: Path | None = None) -> Path:
    """The project: --project-dir, else $SPARKPLAY_PROJECT_DIR, else the nearest one above the working
    directory, else the checkout this package runs from, else the one installed with it."""
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
    for candidate in (Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents, BUNDLED):
        if _is_project(candidate):
            return candidate
    raise BadInput(
        "no sparkplay project found above the working directory, and none installed with the package",
        "run from your sparkplay checkout, pass --project-dir, or reinstall sparkplay (pipx install sparkplay)",
    )


def is_installed(project: Path) -> bool:
    """Whether `project` is the copy installed with the package (read-only code, data kept elsewhere)."""
    return project.resolve() == BUNDLED.resolve()


def _xdg(variable: str, fallback: str) -> Path:
    value = os.environ.get(variable)
    return Path(value) if value and Path(value).is_absolute() else Path.home() / fallback


def data_dir(project: Path) -> Path:
    """Where the user's recipes, backups, the lab inventory and bench results live."""
    if os.environ.get("SPARKPLAY_DATA_DIR"):
        return Path(os.environ["SPARKPLAY_DATA_DIR"])
    return _xdg("XDG_DATA_HOME", ".local/share") / "sparkplay" if is_installed(project) else project


def cache_dir(project: Path) -> Path:
    """Caches that can be rebuilt (the lab's generated model, Ansible's fact cache)."""
    if os.environ.get("SPARKPLAY_CACHE_DIR"):
        return Path(os.environ["SPARKPLAY_CACHE_DIR"])
    return _xdg("XDG_CACHE_HOME", ".cache") / "sparkplay" if is_installed(project) else project / ".cache"


def default_inventory(project: Path) -> Path:
    """The inventory used when -i is not given (where `sparkplay init` writes by default)."""
    if os.environ.get("SPARKPLAY_INVENTORY"):
        return Path(os.environ["SPARKPLAY_INVENTORY"])
    if is_installed(project):
        return _xdg("XDG_CONFIG_HOME", ".config") / "sparkplay" / "inventory"
    return project / "inventory" / "local"  # ansible.cfg's default, for `ansible-playbook` without -i


def state_dir() -> Path:
    """Where runs keep their artifacts: $SPARKPLAY_STATE_DIR, else $XDG_STATE_HOME/sparkplay."""
    if os.environ.get("SPARKPLAY_STATE_DIR"):
        return Path(os.environ["SPARKPLAY_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sparkplay"
