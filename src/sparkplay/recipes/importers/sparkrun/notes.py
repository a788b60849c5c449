"""What a sparkrun import says of what it read beyond the engine's command: the privileged requests it carries
(mods, a preamble, pre_exec: each applied only where the inventory allows it), what sparkplay leaves out and
why, what it does not read at all. Each is a note on the recipe's field (RawRecipe.note), shown by the import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from textwrap import shorten
from typing import Any

from sparkplay.recipes.importers.sparkrun.executor import Executor
from sparkplay.recipes.importers.sparkrun.fields import DESCRIPTIVE, NOT_HONOURED_WHY
from sparkplay.recipes.raw import RawRecipe

# the end of every privileged request's note: where the user says yes to it
ALLOWED_WHERE = "only where the inventory allows it (serve_allow: the entry the warning below names)"


@dataclass
class LeftOut:
    """The launcher's features as read: what sparkplay honours and what it keeps unhonoured or does not read."""

    not_honoured: dict[str, Any]  # sparkrun's key -> its value, kept in the recipe's extra
    unknown: dict[str, Any]  # keys sparkplay does not read
    container: Executor  # executor_config as the engine's container takes it
    mods: list[dict[str, Any]] = field(default_factory=list)
    mods_missing: Any = None
    pre_exec: dict[str, Any] | None = None
    pre_exec_missing: Any = None
    bench: dict[str, Any] | None = None


def privileged(raw: RawRecipe, left: LeftOut) -> None:
    """A note per privileged request: each mod, the command's preamble, pre_exec."""
    for mod in left.mods:
        raw.note(
            "engine.mods",
            "derived",
            f"mod {mod['name']} (sha256 {mod['sha256'][:12]}, {len(mod['files'])} "
            f"file(s)): a privileged request: its run.sh runs as root in the engine's container before the "
            f"engine, {ALLOWED_WHERE}",
        )
    if raw.preamble:
        raw.note(
            "engine.preamble",
            "derived",
            f"the command runs {len(raw.preamble['commands'])} command(s) before the engine (sha256 "
            f"{raw.preamble['sha256'][:12]}): a privileged request: in the engine's container on every rank, in "
            f"the shell that then starts the engine, {ALLOWED_WHERE}",
        )
    if left.pre_exec:
        raw.note(
            "engine.pre_exec",
            "derived",
            f"{len(left.pre_exec['commands'])} command(s) (sha256 "
            f"{left.pre_exec['sha256'][:12]}): a privileged request: each runs by bash as root in every rank's "
            f"engine container before the engine (and its mods), {ALLOWED_WHERE}",
        )


def left_out(raw: RawRecipe, secrets: list[str], left: LeftOut) -> None:
    """A note per env value left out, per launcher feature not honoured, per key not read."""
    for key in secrets:
        raw.note(
            "serve.env",
            "derived",
            f"{key} left out: sparkrun fills it from the controller's environment; "
            "sparkplay never stores such values in a recipe (the HF token is checkpoint_hf_token)",
        )
    for key, value in left.not_honoured.items():
        why = NOT_HONOURED_WHY.get(key, "").format(value=value) or f"sparkrun's {key} has no sparkplay equivalent"
        if key == "mods" and left.mods_missing:
            why += f" (not found beside the recipe or in its registry checkout: {left.mods_missing})"
        if key == "pre_exec" and left.pre_exec_missing:
            why += f": {left.pre_exec_missing}"
        raw.note(f"extra.sparkrun_not_honoured.{key}", "ignored", why)
    unknown = dict(left.unknown)
    if unknown.get("executor") == "docker":  # sparkrun's default executor, and how sparkplay runs the engine too
        del unknown["executor"]
    for key in sorted(k for k in unknown if k not in DESCRIPTIVE):
        raw.note(
            f"extra.{key}",
            "ignored",
            f"{shorten(str(unknown[key]), 80)}: sparkplay does not read sparkrun's "
            f"{key!r}; what it asks is not applied (kept in the recipe's extra)",
        )


def built_locally(raw: RawRecipe, build_args: list[Any]) -> None:
    """The recipe's image is built by its launcher, not pulled: say how to have it on every node."""
    args = " ".join(map(str, build_args))
    raw.note(
        "engine.image",
        "ignored",
        f"{raw.image} is built by the recipe's launcher (eugr's build-and-copy.sh"
        f"{', build_args ' + args if args else ''}), not pulled from a registry: build it under that tag on "
        "every node first, or --set engine.image to a published image",
    )
