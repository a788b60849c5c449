"""A semantic diff of two recipes: what would change for the deployment, not for the file."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sparkplay import argv

# What a deployment does not depend on: where the recipe came from, the words around it.
NOT_DEPLOYED = ("schema", "name", "title", "source", "notes", "provenance", "extra")
# Compared entry by entry below, for readable lines.
BY_ENTRY = ("knobs", "serve.args", "serve.env")


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a recipe by its dotted path (list items as [i]), for the fields the deployment reads."""
    if isinstance(node, dict):
        found: dict[str, Any] = {}
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if (not prefix and key in NOT_DEPLOYED) or path in BY_ENTRY:
                continue
            found.update(_flatten(value, path))
        return found or ({prefix: {}} if prefix else {})
    if isinstance(node, list) and not all(isinstance(item, str | int | float | bool | None) for item in node):
        found = {}
        for i, item in enumerate(node):
            found.update(_flatten(item, f"{prefix}[{i}]"))
        return found or {prefix: []}
    return {prefix: node}


def deployed_digest(doc: dict[str, Any]) -> str:
    """sha256 of what a deployment reads from a recipe (the words around it left out)."""
    deployed = {k: v for k, v in doc.items() if k not in NOT_DEPLOYED}
    return hashlib.sha256(json.dumps(deployed, sort_keys=True).encode()).hexdigest()


def _get(doc: dict[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _show(value: Any) -> str:
    return "(none)" if value is None else str(value)


def mapping_diff(label: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            lines.append(f"{label} {key}: removed (was {_show(old[key])})")
        elif key not in old:
            lines.append(f"{label} {key}: added ({_show(new[key])})")
        elif old[key] != new[key]:
            lines.append(f"{label} {key}: {_show(old[key])} -> {_show(new[key])}")
    return lines


def _flags(args: list[str]) -> dict[str, str]:
    return {flag: "on" if value is None else value for flag, value in argv.flag_map(args).items()}


def semantic_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per difference in anything the deployment reads (every field, checkpoints, drafters,
    memory, back ends, health...), then knobs, flags and env added/removed/changed."""
    before, after = _flatten(old), _flatten(new)
    lines = [
        f"{field}: {_show(before.get(field))} -> {_show(after.get(field))}"
        for field in sorted(before.keys() | after.keys())
        if before.get(field) != after.get(field)
    ]
    lines += mapping_diff("knob", old.get("knobs") or {}, new.get("knobs") or {})
    old_args, new_args = _get(old, "serve.args") or [], _get(new, "serve.args") or []
    lines += mapping_diff("flag", _flags(old_args), _flags(new_args))
    lines += mapping_diff("env", _get(old, "serve.env") or {}, _get(new, "serve.env") or {})
    return lines
