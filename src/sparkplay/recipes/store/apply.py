"""`sparkplay apply`: record which recipe an inventory serves, and the user's knob values.

The choice lands in INVENTORY/group_vars/all/sparkplay.yml, where every
playbook reads it (`sparkplay_recipe`, `sparkplay_knobs`). An existing file
that differs is shown as a diff and asked about first, then backed up.
This step only records; running the playbooks is the next step, kept
separate so the CLI can plan, ask and run them (see `record`'s caller).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sparkplay import imageref, topology
from sparkplay import inventory as inventory_mod
from sparkplay.errors import BadInput, Declined
from sparkplay.fsutil import atomic_write
from sparkplay.recipes import model
from sparkplay.recipes.diff import deployed_digest, mapping_diff
from sparkplay.recipes.store import catalog, registry

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
    warnings: list[str] = field(default_factory=list)


def render(recipe: dict[str, Any], knobs: dict[str, Any], pins: dict[str, str] | None = None) -> str:
    body: dict[str, Any] = {
        "sparkplay_recipe": recipe["name"],
        # what the recipe held when it was chosen: a re-import that changes it is a change to ask about here
        "sparkplay_recipe_sha256": deployed_digest(recipe),
        "sparkplay_knobs": dict(sorted(knobs.items())),
    }
    if pins:  # the digest a floating tag named when this choice was made: every rank, every run, same bytes
        body["sparkplay_image_pins"] = dict(sorted(pins.items()))
    return HEADER + "---\n" + yaml.safe_dump(body, sort_keys=False)


def pin_image(recipe: dict[str, Any], pins: dict[str, Any]) -> dict[str, Any]:
    """The recipe with its floating image replaced by the digest recorded for it (if one was)."""
    image = (recipe.get("engine") or {}).get("image")
    pinned = pins.get(image) if image else None
    if not isinstance(pinned, str):
        return recipe
    if not imageref.pinned(pinned) or pinned.partition("@")[0] not in (image, f"{image}:latest"):
        raise BadInput(
            f"sparkplay_image_pins maps {image} to {pinned!r}, which is not that image by digest",
            "run `sparkplay apply` again, or remove the entry",
        )
    return {**recipe, "engine": {**recipe["engine"], "image": pinned}}


def _trusted_images(folder: Path) -> list[str]:
    """The inventory's own serve_trusted_images (group_vars/all), the user's word on which registries it uses;
    a file that is not plain YAML (a vault) is skipped."""
    found: list[str] = []
    group = folder / "group_vars"
    for path in [group / "all.yml", group / "all.yaml", *sorted((group / "all").glob("*.y*ml"))]:
        try:
            data = yaml.safe_load(path.read_text()) if path.is_file() else None
        except (OSError, yaml.YAMLError):
            continue
        value = data.get("serve_trusted_images") if isinstance(data, dict) else None
        found += [str(v) for v in value] if isinstance(value, list) else []
    return found


def resolve_pins(
    recipe: dict[str, Any], earlier: dict[str, Any], trusted: Iterable[str] = ()
) -> tuple[dict[str, str], str | None]:
    """The digest the recipe's floating image names now; on failure the earlier pin (if any) and a warning.
    `trusted`: the inventory's serve_trusted_images (a registry inward is asked only where it names one)."""
    image = recipe["engine"].get("image")
    if recipe["engine"].get("runtime") != "docker" or not image or not imageref.floating(image):
        return {}, None
    try:
        return {image: registry.resolve(image, trusted)}, None
    except registry.RegistryError as exc:
        kept = earlier.get(image)
        keeping = f"; keeping the digest recorded before ({kept})" if isinstance(kept, str) else ""
        return ({image: kept} if isinstance(kept, str) else {}), f"could not pin {image} to a digest: {exc}{keeping}"


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
    _check_nodes(recipe, inventory)
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
    pins, warning = resolve_pins(recipe, old.get("sparkplay_image_pins") or {}, _trusted_images(folder))
    warnings = [warning] if warning else []
    text = render(recipe, knobs, pins)
    if not target.exists():
        diff = [
            f"sparkplay_recipe: {recipe_name}",
            *(f"knob {k}: {v}" for k, v in sorted(knobs.items())),
            *(f"image {k} pinned to {v}" for k, v in pins.items()),
        ]
        if dry_run:
            return Recorded(target, "would create", diff, warnings=warnings)
        atomic_write(target, text)
        return Recorded(target, "created", diff, warnings=warnings)
    if target.read_text() == text:
        return Recorded(target, "unchanged", [], warnings=warnings)
    diff = mapping_diff("", _plain(yaml.safe_dump(old)), _plain(text))
    diff += mapping_diff("knob", old.get("sparkplay_knobs") or {}, knobs)
    diff = [line.strip() for line in diff]
    recorded_digest = old.get("sparkplay_recipe_sha256")
    if old.get("sparkplay_recipe") == recipe_name and recorded_digest not in (None, deployed_digest(recipe)):
        diff = [line for line in diff if not line.startswith("sparkplay_recipe_sha256")]
        diff.insert(
            0,
            f"recipe {recipe_name}: its content changed since it was applied (re-imported or edited; "
            f"`sparkplay recipe show {recipe_name}` shows it now)",
        )
    diff = diff or ["only the file's comments and layout differ (same recipe, knobs and pins)"]
    if dry_run:
        return Recorded(target, "would replace", diff, warnings=warnings)
    if not confirm(f"Replace {target}?", diff, target):
        raise Declined(f"kept {target} as it was", "pass --yes to replace it (the old one is backed up)")
    saved = catalog.backup(target, folder / ".sparkplay-backups" / "group_vars" / "all")
    atomic_write(target, text)
    return Recorded(target, "replaced", diff, saved, warnings)


def _plain(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    return {k: v for k, v in data.items() if k != "sparkplay_knobs"}


def _check_nodes(recipe: dict[str, Any], inventory: Path) -> None:
    """The recipe's node count against the inventory's, when it lists its nodes already."""
    hosts_path = inventory / "hosts.yml" if inventory.is_dir() else inventory
    if not hosts_path.is_file():
        return  # an inventory still being written: the playbooks check again before any node is touched
    try:
        nodes = inventory_mod.hosts(hosts_path)
    except BadInput:
        return
    topology.check_node_count(recipe, len(nodes))
