"""`sparkplay apply`: record which recipe an inventory serves, and the user's knob values.

The choice lands in INVENTORY/group_vars/all/sparkplay.yml, where every
playbook reads it (`sparkplay_recipe`, `sparkplay_knobs`). An existing file
that differs is shown as a diff and asked about first, then backed up.
This step only records; running the playbooks is the next step, kept
separate so the CLI can plan, ask and run them (see `record`'s caller).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sparkplay.errors import BadInput, Declined
from sparkplay.fsutil import atomic_write
from sparkplay.recipes import catalog, model
from sparkplay.recipes.diff import mapping_diff

MARKER = "# Written by `sparkplay apply`"
HEADER = f"""{MARKER}: the recipe this inventory serves and your knob values.
# Change it with `sparkplay apply RECIPE -i INVENTORY [--set KNOB=VALUE]`; the
# previous version is kept in .sparkplay-backups/ beside this inventory.
"""


def inventory_dir(inventory: Path) -> Path:
    """An inventory folder, or the folder of an inventory file."""
    folder = inventory if inventory.is_dir() else inventory.parent
    if not inventory.exists() or not folder.is_dir():
        raise BadInput(f"inventory {inventory} does not exist", "pass -i with your inventory folder or hosts file")
    return folder


def parse_knobs(pairs: list[str]) -> dict[str, Any]:
    """`KNOB=VALUE` strings to typed values, checked against the recipe schema's knobs."""
    spec = model.schema()["properties"]["knobs"]["properties"]
    knobs: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name not in spec:
            raise BadInput(f"--set {pair!r} is not KNOB=VALUE with a known knob", f"knobs: {', '.join(sorted(spec))}")
        value: Any = yaml.safe_load(text) if text else None
        try:
            jsonschema.validate(value, spec[name])
        except jsonschema.ValidationError as exc:
            raise BadInput(f"--set {name}={text}: {exc.message}", f"give {name} a value its schema allows") from None
        knobs[name] = value
    return knobs


@dataclass(frozen=True)
class Recorded:
    path: Path
    action: str  # "created", "replaced", "unchanged", "would create", "would replace"
    diff: list[str]
    backup: Path | None = None


def render(recipe: dict[str, Any], knobs: dict[str, Any]) -> str:
    body = {
        "sparkplay_recipe": recipe["name"],
        "sparkplay_knobs": dict(sorted(knobs.items())),
    }
    return HEADER + "---\n" + yaml.safe_dump(body, sort_keys=False)


def record(
    project: Path,
    recipe_name: str,
    inventory: Path,
    knob_pairs: list[str],
    confirm: catalog.Confirm,
    *,
    dry_run: bool = False,
) -> Recorded:
    folder = inventory_dir(inventory)
    cat = catalog.catalog_dir(project)
    recipe = catalog.load_for_use(cat, recipe_name)
    knobs = parse_knobs(knob_pairs)
    target = folder / "group_vars" / "all" / "sparkplay.yml"
    old: dict[str, Any] = {}
    if target.exists():
        old = yaml.safe_load(target.read_text()) or {}
        if old.get("sparkplay_recipe") == recipe_name:
            knobs = {**(old.get("sparkplay_knobs") or {}), **knobs}  # keep earlier choices for the same recipe
    candidate = {**recipe, "knobs": {**recipe.get("knobs", {}), **knobs}}
    bad = [p for p in model.errors(candidate) if p.key.startswith("knobs")]
    if bad:
        raise BadInput(f"{bad[0].key}: {bad[0].message}", bad[0].fix)
    text = render(recipe, knobs)
    if not target.exists():
        diff = [f"sparkplay_recipe: {recipe_name}", *(f"knob {k}: {v}" for k, v in sorted(knobs.items()))]
        if dry_run:
            return Recorded(target, "would create", diff)
        atomic_write(target, text)
        return Recorded(target, "created", diff)
    if target.read_text() == text:
        return Recorded(target, "unchanged", [])
    diff = mapping_diff("", _plain(yaml.safe_dump(old)), _plain(text))
    diff += mapping_diff("knob", old.get("sparkplay_knobs") or {}, knobs)
    diff = [line.strip() for line in diff] or ["only the file's comments differ"]
    if dry_run:
        return Recorded(target, "would replace", diff)
    if not confirm(f"Replace {target}?", diff, target):
        raise Declined(f"kept {target} as it was", "pass --yes to replace it (the old one is backed up)")
    saved = catalog.backup(target, folder / ".sparkplay-backups" / "group_vars" / "all")
    atomic_write(target, text)
    return Recorded(target, "replaced", diff, saved)


def _plain(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    return {k: v for k, v in data.items() if k != "sparkplay_knobs"}
