"""The roles' own task files and templates, rendered by Ansible's templating, without a node.

For knobs whose effect is an argument Ansible hands a module (a command's
argv, an environment, an apt package list, a play's keyword), the test
renders that argument from the real task file with the roles' real defaults
and one knob changed. Used where the effect cannot happen here (no NVIDIA
repository, no RDMA, no Hugging Face hub); everything that can happen is
tested on the lab (tests/test_knobs_lab.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

from tests.conftest import PROJECT

_LOADER = DataLoader()
init_plugin_loader()  # lookups (the roles' defaults read the controller's environment) and collections


def _trusted(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def role_vars(*roles: str, **overrides: Any) -> dict[str, Any]:
    """The defaults and vars of `roles` (the project-wide `sparkplay` role's first), then `overrides`."""
    found: dict[str, Any] = {}
    for role in ("sparkplay", *roles):
        for part in ("defaults", "vars"):
            path = PROJECT / "roles" / role / part / "main.yml"
            if path.exists():
                found.update(_LOADER.load_from_file(str(path)) or {})
    found.update(overrides)
    return found


def _walk(tasks: list[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for task in tasks:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key) or [])


def task(path: str, name: str) -> Mapping[str, Any]:
    """The one task in roles/ or playbooks/ `path` named `name`, else the one whose name starts with it."""
    loaded = _LOADER.load_from_file(str(PROJECT / path)) or []
    plays = [p for p in loaded if "hosts" in p]
    tasks = [t for p in plays for t in (p.get("tasks") or [])] if plays else loaded
    found = [t for t in _walk(tasks) if str(t.get("name", "")) == name] or [
        t for t in _walk(tasks) if str(t.get("name", "")).startswith(name)
    ]
    assert len(found) == 1, f"{path}: {len(found)} tasks named {name!r}"
    return found[0]


def plays(path: str, hosts: str) -> list[Mapping[str, Any]]:
    """The plays in `path` that run on `hosts`."""
    return [p for p in _LOADER.load_from_file(str(PROJECT / path)) if p.get("hosts") == hosts]


def render(value: Any, variables: Mapping[str, Any]) -> Any:
    """`value` (a task's argument, as written) templated as Ansible would with `variables`."""
    templar = Templar(loader=_LOADER, variables=_trusted(dict(variables)))
    return templar.template(_trusted(value))


def template(path: str, variables: Mapping[str, Any]) -> str:
    """A role's Jinja template file rendered with `variables` (Ansible's filters and the project's)."""
    text = (PROJECT / path).read_text()
    return render(text, variables)
