"""Importer for a recipe website's JSON (localairecipes.com's API and look-alikes).

The schema is undocumented, so this is tolerant: other field names for the
same things, env as an object or as prose, a `recipe` wrapper, unknown
fields (kept under `extra`). The command line is the source of truth for
flags; the prose only contributes KEY=VALUE settings, the image tag and the
API address where it states them.
"""

from __future__ import annotations

import re
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline
from sparkplay.recipes.model import slugify
from sparkplay.recipes.normalise import RawRecipe

SITE_API = "https://localairecipes.com/api/v1/recipes/{slug}.json"
FIELD_NAMES: dict[str, tuple[str, ...]] = {
    "title": ("title", "name", "recipe_name"),
    "command": ("command", "cmd", "command_line", "commandline", "serve_command", "launch_command", "run_command"),
    "env": ("env", "environment", "env_vars", "environment_variables"),
    "notes": ("notes", "description", "details", "body"),
    "image": ("image", "docker_image", "container_image"),
    "slug": ("slug", "id"),
}
KNOWN_FIELDS = {name for names in FIELD_NAMES.values() for name in names} | {"hardware"}
# KEY=VALUE in prose: an upper-case name, a value up to a separator; "<half>" style placeholders skipped
PROSE_SETTING = re.compile(r"(?<![A-Za-z0-9_-])([A-Z][A-Z0-9_]{1,})=([^\s,;()+<>]+)")
IMAGE_TAG = re.compile(r"\bimage tag[:\s]+([0-9a-f]{7,64})\b", re.IGNORECASE)
IMAGE_REF = re.compile(r"\bimage[:\s]+([a-z0-9][a-z0-9._/-]*:[A-Za-z0-9._-]+)")
API_ADDRESS = re.compile(r"\bAPI\b[^.]*?\bon\s+(\d{1,3}(?:\.\d{1,3}){3}|localhost|\[[0-9a-fA-F:]+\]):(\d{1,5})")


def _field(data: dict[str, Any], key: str) -> Any:
    for name in FIELD_NAMES[key]:
        if name in data and data[name] not in (None, ""):
            return data[name]
    return None


CONDITION_BEFORE = re.compile(r"\b(only with|when|if|unless|once)\s+$", re.IGNORECASE)
CONDITION_AFTER = re.compile(r"^(\s*\+\s*[A-Z][A-Z0-9_]*=\S+)*\s+(when|if|only|unless|once)\b", re.IGNORECASE)


def prose_settings(text: str) -> tuple[dict[str, str], list[str]]:
    """Concrete KEY=VALUE settings a prose paragraph names (first mention wins),
    and the keys skipped because the prose makes them conditional ("X=1 when
    --kv-shard", "only with X=1")."""
    found: dict[str, str] = {}
    conditional: list[str] = []
    for match in PROSE_SETTING.finditer(text):
        key, value = match.group(1), match.group(2).rstrip(".")
        before = text[max(0, match.start() - 16) : match.start()]
        sentence_ended = match.group(2).endswith(".")
        if CONDITION_BEFORE.search(before) or (not sentence_ended and CONDITION_AFTER.match(text[match.end() :])):
            conditional.append(key)
        elif key not in conditional:
            found.setdefault(key, value)
    return found, conditional


def to_raw(data: dict[str, Any], source: dict[str, Any], name: str | None) -> RawRecipe:
    if isinstance(data.get("recipe"), dict):  # some APIs wrap the recipe
        data = {**data, **data["recipe"]}
    command = _field(data, "command")
    if isinstance(command, list) and all(isinstance(t, str) for t in command):
        command = " ".join(cmdline.shlex.quote(t) for t in command)
    if not isinstance(command, str) or not command.strip():
        raise BadInput(
            "the recipe JSON has no command line",
            f"it needs one of the fields {', '.join(FIELD_NAMES['command'])} holding the serve command",
        )
    parsed = cmdline.parse(command)
    title = str(_field(data, "title") or parsed.model or "recipe")
    env_field = _field(data, "env")
    notes = _field(data, "notes")
    prose = " ".join(str(x) for x in (env_field, notes) if isinstance(x, str))

    raw = RawRecipe(
        name="",
        title=title,
        source=source,
        engine=parsed.engine,
        model=parsed.model,
        args=parsed.args,
        notes=notes if isinstance(notes, str) else None,
        extra={k: v for k, v in data.items() if k not in KNOWN_FIELDS and k != "recipe"},
    )
    env: dict[str, str] = dict(parsed.env)
    if isinstance(env_field, dict):
        env.update({str(k): str(v) for k, v in env_field.items()})
    elif isinstance(env_field, str):
        settings, conditional = prose_settings(env_field)
        env.update(settings)
        if settings:
            raw.note("serve.env", "derived", f"{len(settings)} KEY=VALUE settings named in the recipe's env prose")
        if conditional:
            raw.note("serve.env", "derived", f"left out, conditional in the prose: {', '.join(conditional)}")
    raw.env = {k: v for k, v in env.items() if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)}
    if isinstance(env_field, str):
        raw.notes = "\n\n".join(x for x in (env_field, raw.notes) if x)

    image = _field(data, "image")
    if isinstance(image, str):
        raw.image = image
    elif match := IMAGE_REF.search(prose):
        raw.image = match.group(1)
        raw.note("engine.image", "derived", "named in the recipe's prose")
    elif match := IMAGE_TAG.search(prose):
        raw.image = match.group(1)  # a bare tag; the repository is filled from the known engines table
        raw.note("engine.image", "derived", "image tag named in the recipe's prose")
    if match := API_ADDRESS.search(prose):
        host, port = match.group(1).strip("[]"), int(match.group(2))
        if cmdline.flag_value(parsed.args, "--host") is None:
            raw.bind = host
            raw.note("serve.bind", "derived", "API address stated in the recipe's notes")
        if cmdline.flag_value(parsed.args, "--port") is None:
            raw.port = port
            raw.note("serve.port", "derived", "API address stated in the recipe's notes")

    slug = _field(data, "slug")
    if isinstance(slug, str) and slug:
        source["canonical_url"] = SITE_API.format(slug=slugify(slug))
    served = cmdline.flag_value(parsed.args, "--served-model-name")
    raw.name = name or slugify(served or (slug if isinstance(slug, str) else None) or title)
    return raw
