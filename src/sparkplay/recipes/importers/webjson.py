"""Importer for a recipe website's JSON (localairecipes.com's API and look-alikes).

The schema is undocumented, so this is tolerant: other field names for the
same things, env as an object or as prose, a `recipe` wrapper, unknown
fields (kept under `extra`). The command line is the source of truth for
flags; the prose only contributes KEY=VALUE settings, the image tag and the
API address where it states them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from sparkplay import argv, imageref
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline, model
from sparkplay.recipes.importers.pasted import launch as paste
from sparkplay.recipes.importers.pasted import launches
from sparkplay.recipes.importers.pasted.launches import Launch
from sparkplay.recipes.model import slugify
from sparkplay.recipes.raw import RawRecipe

SITE_API = "https://localairecipes.com/api/v1/recipes/{slug}.json"
FIELD_NAMES: dict[str, tuple[str, ...]] = {
    "title": ("title", "name", "recipe_name", "headline", "display_name"),
    "command": ("command", "cmd", "command_line", "commandline", "serve_command", "launch_command", "run_command"),
    "env": ("env", "environment", "env_vars", "environment_variables"),
    "notes": ("notes", "description", "details", "body"),
    "image": ("image", "docker_image", "container_image", "container", "docker"),
    "revision": ("revision", "model_revision", "commit"),
    "slug": ("slug", "id"),
}
KNOWN_FIELDS = {name for names in FIELD_NAMES.values() for name in names} | {"hardware"}
# KEY=VALUE in prose: an upper-case name, a value up to a separator; "<half>" style placeholders skipped
PROSE_SETTING = re.compile(r"(?<![A-Za-z0-9_-])([A-Z][A-Z0-9_]*)=([^\s,;()+<>]+)")
IMAGE_TAG = re.compile(r"\bimage tag[:\s]+([0-9a-f]{7,64})\b", re.IGNORECASE)
# "Image nvcr.io/...", "image: repo:tag", "docker pull repo:tag", in any case; checked against the grammar after
# (a lookahead, so "the container: docker pull X" tries "docker pull X" after "container" gives no image)
IMAGE_REF = re.compile(
    r"(?=\b(?:image|docker pull|container)\b(?:\s+is)?[:\s]+([A-Za-z0-9][^\s,;()'\"`<>]*))", re.IGNORECASE
)
REVISION = re.compile(
    r"\b(?:revision|commit|rev|model_revision)\b(?:\s+is)?[:\s=]+([0-9a-f]{40}|v?\d[A-Za-z0-9._-]*)", re.IGNORECASE
)
TRAILING = ".,;:!?)]}'\""
ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
WRAPPERS = ("recipe", "data", "result", "item", "attributes", "payload")
API_ADDRESS = re.compile(r"\bAPI\b[^.]*?\bon\s+(\d{1,3}(?:\.\d{1,3}){3}|localhost|\[[0-9a-fA-F:]+\]):(\d{1,5})")


def _holders(data: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The objects around the field at `where` (`a.b[2].c`), innermost first, the recipe itself last: a
    command nested in a container spec or a service has its image and env beside it."""
    chain, node = [data], data
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", where)[:-1]:
        if part.startswith("[") and isinstance(node, list) and int(part[1:-1]) < len(node):
            node = node[int(part[1:-1])]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            break
        if isinstance(node, dict):
            chain.append(node)
    return chain[::-1]


def _near(holders: list[dict[str, Any]], key: str, kinds: tuple[type, ...] = (str,)) -> Any:
    """The field for `key` in the nearest holder that has one of the right kind."""
    for holder in holders:
        for name in FIELD_NAMES[key]:
            if isinstance(holder.get(name), kinds) and holder[name] not in ("", [], {}):
                return holder[name]
    return None


def _env_mapping(value: Any) -> dict[str, str] | None:
    """An env field as a mapping: an object, a list of {name, value} (Kubernetes) or of "K=V" (Compose)."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, list):
        if all(isinstance(e, dict) and "name" in e for e in value):
            return {str(e["name"]): str(e.get("value", "")) for e in value}
        if all(isinstance(e, str) and "=" in e for e in value):
            return dict(e.split("=", 1) for e in value)
    return None


def _field(data: dict[str, Any], key: str) -> Any:
    for name in FIELD_NAMES[key]:
        if name in data and data[name] not in (None, ""):
            return data[name]
    return None


CONDITION_BEFORE = re.compile(r"\b(only with|when|whenever|if|unless|once)\s+$", re.IGNORECASE)
CONDITION_OPENS = re.compile(r"^\s*(if|when|whenever|once|unless|only|optionally|in case)\b", re.IGNORECASE)
CONDITION_AFTER = re.compile(r"^(\s*\+\s*[A-Z][A-Z0-9_]*=\S+)*\s+(when|if|only|unless|once)\b", re.IGNORECASE)


def prose_settings(text: str) -> tuple[dict[str, str], list[str]]:
    """Concrete KEY=VALUE settings a prose paragraph names (first mention wins),
    and the keys skipped because the prose makes them conditional ("X=1 when
    --kv-shard", "only with X=1")."""
    found: dict[str, str] = {}
    conditional: list[str] = []
    for match in PROSE_SETTING.finditer(text):
        key, value = match.group(1), match.group(2).rstrip(".")
        # a sentence that opens with a condition ("If you want, X=1") governs every setting in it;
        # elsewhere a condition governs the setting right after it ("X=1 when ...", "only with X=1")
        start = max(
            text.rfind(". ", 0, match.start()), text.rfind(";", 0, match.start()), text.rfind("\n", 0, match.start())
        )
        opens = CONDITION_OPENS.match(text[start + 1 : match.start()])
        before = text[max(0, match.start() - 16) : match.start()]
        sentence_ended = match.group(2).endswith(".")
        after = not sentence_ended and CONDITION_AFTER.match(text[match.end() :])
        if opens or CONDITION_BEFORE.search(before) or after:
            conditional.append(key)
        elif key not in conditional:
            found.setdefault(key, value)
    return found, conditional


def _strings(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, str | list[str]]]:
    """Every string, or list of strings, in a JSON value, with where it sits (a.b[2])."""
    if depth > model.MAX_DEPTH:  # the shape check bounds it already; a guard for direct callers
        return
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            yield path, value
        for i, item in enumerate(value):
            if not isinstance(item, str):
                yield from _strings(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key), depth + 1)


def _as_command(text: str) -> str | None:
    """`text`, or one of its lines, when it is a known engine's command line (its first word the server)."""
    joined = re.sub(r"\\\r?\n", " ", text)
    exported: list[str] = []  # `export K=V` lines of the same snippet, before the command, are its environment
    for line in joined.splitlines():
        line = line.strip().removeprefix("$ ").removeprefix("exec ")
        if not line or line.startswith("#"):
            continue
        if assignments := _assignments(line):
            exported += assignments
            continue
        try:
            cmdline.parse(line)
        except BadInput:
            continue
        return " ".join([*(cmdline.shlex.quote(a) for a in exported), line])
    return text if _pasted(text) else None


def _pasted(text: str) -> Launch | None:
    """The one engine launch a snippet holds in a shape users paste (docker run/exec, bash -c, a comment first)."""
    try:
        found, _ = launches.find(text)
    except BadInput:
        return None
    return found.launches[0] if len(found.launches) == 1 else None


def _assignments(line: str) -> list[str]:
    """`export A=1 B=2` or `A=1` as NAME=VALUE words; [] for anything else (a value the shell would expand
    is not a setting sparkplay can carry)."""
    try:
        words = cmdline.shlex.split(line)
    except ValueError:
        return []
    if words[:1] == ["export"]:
        words = words[1:]
    if words and all(ENV_WORD.match(w) and "$" not in w and "`" not in w for w in words):
        return words
    return []


def find_command(data: dict[str, Any]) -> tuple[str, str]:
    """The engine command line wherever the JSON holds it, and the field it came from.

    The fields named for it come first; otherwise every string (or list of
    strings: argv words or lines) is tried, and exactly one distinct command
    line must be found, so a page quoting two engines is refused, not guessed.
    """
    named = _field(data, "command")
    if isinstance(named, list) and all(isinstance(t, str) for t in named):
        named = " ".join(cmdline.shlex.quote(t) for t in named)
    if isinstance(named, str) and named.strip():
        return named, next(n for n in FIELD_NAMES["command"] if data.get(n) not in (None, ""))
    found: dict[str, str] = {}
    for where, value in _strings(data, ""):
        if isinstance(value, list):
            words = " ".join(cmdline.shlex.quote(v) for v in value)
            line = _as_command(words) if " " not in value[0] else None
            candidates = [line] if line else [_as_command("\n".join(value))]
        else:
            candidates = [_as_command(value)]
        for line in candidates:
            if line:
                found.setdefault(line, where)
    if len(found) > 1:
        raise BadInput(
            f"the recipe JSON holds more than one engine command line (in {', '.join(sorted(set(found.values())))})",
            "import it with the command in a field named command, or fix the recipe",
        )
    if not found:
        raise BadInput(
            "the recipe JSON has no command line",
            f"no field holds an engine's serve command ({registry.command_help()}); add one under command",
        )
    line, where = next(iter(found.items()))
    return line, where


def _prose(data: dict[str, Any], skip: str) -> str:
    """Every prose string in the recipe but the command's own field, for settings, images and revisions."""
    return "\n".join(v for where, v in _strings(data, "") if isinstance(v, str) and where != skip)


def find_image(holders: list[dict[str, Any]], prose: str) -> tuple[str | None, str | None]:
    """The image reference and how it was found: a field for it, else the prose ("Image X.", "docker pull X")."""
    image = _near(holders, "image")
    if isinstance(image, str):
        return image, None  # stated outright: checked with the recipe (an invalid one is refused there)
    for match in IMAGE_REF.finditer(prose):
        candidate = _normalised_reference(match.group(1).rstrip(TRAILING))
        if candidate and imageref.is_reference(candidate) and ("/" in candidate or ":" in candidate):
            return candidate, "named in the recipe's prose"
    if match := IMAGE_TAG.search(prose):
        return match.group(1), "image tag named in the recipe's prose"  # the repository comes from the table
    return None, None


def _normalised_reference(text: str) -> str:
    """Repository names are lower case by the grammar; a tag keeps its case."""
    name, sep, rest = text.partition("@")
    head, colon, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    return f"{head.lower()}{colon}{tag}{sep}{rest}"


def find_revision(holders: list[dict[str, Any]], prose: str) -> tuple[str | None, str | None]:
    revision = _near(holders, "revision")
    if isinstance(revision, str):
        return revision, None
    if match := REVISION.search(prose):
        return match.group(1).rstrip(TRAILING), "revision named in the recipe's prose"
    return None, None


def unwrap(data: dict[str, Any]) -> dict[str, Any]:
    """APIs wrap the recipe (`{"data": {"recipe": {...}}}`): the wrapper's fields, then the wrapped ones."""
    for _ in range(4):
        inner = next((data[k] for k in WRAPPERS if isinstance(data.get(k), dict)), None)
        if inner is None and len(data) == 1 and isinstance(next(iter(data.values())), dict):
            inner = next(iter(data.values()))
        if inner is None:
            return data
        data = {**{k: v for k, v in data.items() if v is not inner}, **inner}
    return data


def _env(raw: RawRecipe, data: dict[str, Any], parsed: cmdline.Command, env_field: Any, command_field: str) -> None:
    """The engine's environment: the command's own, the recipe's env mapping, and KEY=VALUE settings from its
    env prose and every other prose field; what is named elsewhere in the prose is said, not applied."""
    env: dict[str, str] = dict(parsed.env)
    if (mapping := _env_mapping(env_field)) is not None:
        env.update(mapping)
    # KEY=VALUE settings are read from the env prose and every other prose field alike
    prose_env = "\n".join(
        v for v in (env_field if isinstance(env_field, str) else None, *_other_prose(data)) if isinstance(v, str)
    )
    settings, conditional = prose_settings(prose_env)
    env.update({k: v for k, v in settings.items() if k not in env})
    if settings:
        raw.note("serve.env", "derived", f"{len(settings)} KEY=VALUE settings named in the recipe's env prose")
    if conditional:
        raw.note("serve.env", "derived", f"left out, conditional in the prose: {', '.join(conditional)}")
    raw.env = {k: v for k, v in env.items() if ENV_NAME.match(k)}
    if bad := sorted(k for k in env if not ENV_NAME.match(k)):
        raw.note("serve.env", "ignored", f"not environment variable names, left out: {', '.join(map(repr, bad))}")
    mentioned, _ = prose_settings(
        "\n".join(
            v
            for where, v in _strings(data, "")
            if isinstance(v, str) and where != command_field and not _about_env(where)
        )
    )
    knob_env = registry.spec(parsed.engine).defaults.knob_env
    if elsewhere := {k: v for k, v in mentioned.items() if k not in raw.env}:
        fixes = [f"{k}: sparkplay apply --set {knob_env[k]}=..." for k in elsewhere if k in knob_env]
        if any(k not in knob_env for k in elsewhere):
            fixes.append("others: import with --set serve.env.NAME=VALUE")
        raw.note(
            "serve.env",
            "ignored",
            "named in the recipe's prose outside its environment fields, not applied: "
            + ", ".join(f"{k}={v}" for k, v in elsewhere.items())
            + "; "
            + "; ".join(fixes),
        )


def _address(raw: RawRecipe, prose: str, parsed: cmdline.Command) -> None:
    """The API's address stated in the recipe's notes, where the command does not set it."""
    if (match := API_ADDRESS.search(prose)) is None:
        return
    if argv.flag_value(parsed.args, "--host") is None:
        raw.bind = match.group(1).strip("[]")
        raw.note("serve.bind", "derived", "API address stated in the recipe's notes")
    if argv.flag_value(parsed.args, "--port") is None:
        raw.port = int(match.group(2))
        raw.note("serve.port", "derived", "API address stated in the recipe's notes")


def to_raw(data: dict[str, Any], source: dict[str, Any], name: str | None) -> RawRecipe:
    data = unwrap(data)
    command, command_field = find_command(data)
    around = None  # the engine's line inside docker run/exec or a shell, as a user pastes it
    try:
        parsed = cmdline.parse(command)
    except BadInput:
        launch = _pasted(command)
        if launch is None:
            raise
        around = paste.to_raw(launch, source, name)
        parsed = cmdline.Command(around.engine, around.model, around.args, around.env, around.pinning)
    holders = _holders(data, command_field)
    title = str(_field(data, "title") or _near(holders, "title") or parsed.model or "recipe")
    env_field = _near(holders, "env", (str, dict, list))
    notes = _field(data, "notes")
    prose = _prose(data, command_field)

    raw = RawRecipe(
        name="",
        title=title,
        source=source,
        engine=parsed.engine,
        model=parsed.model,
        args=parsed.args,
        pinning=parsed.pinning,
        notes=notes if isinstance(notes, str) else None,
        extra={k: v for k, v in data.items() if k not in KNOWN_FIELDS and k != command_field},
    )
    if command_field not in FIELD_NAMES["command"]:
        raw.note("serve.args", "derived", f"the command line found in the recipe's field {command_field}")
    if around is not None:
        raw.provenance += around.provenance
        raw.shm_size, raw.ulimits, raw.container_user = around.shm_size, around.ulimits, around.container_user
        raw.preamble, raw.nodes = around.preamble, around.nodes
        if around.extra.get("docker"):
            raw.extra["docker"] = around.extra["docker"]
    _env(raw, data, parsed, env_field, command_field)
    if isinstance(env_field, str):
        raw.notes = "\n\n".join(x for x in (env_field, raw.notes) if x)

    raw.image, how = find_image(holders, prose)
    if raw.image is None and around is not None and around.image:
        raw.image, how = around.image, None  # the docker run's own image
    if how:
        raw.note("engine.image", "derived", how)
    raw.revision, how = find_revision(holders, prose)
    if how:
        raw.note("model.revision", "derived", how)
    _address(raw, prose, parsed)

    slug = _field(data, "slug")
    if isinstance(slug, str) and slug:
        source["canonical_url"] = SITE_API.format(slug=slugify(slug))
    served = argv.flag_value(parsed.args, "--served-model-name")
    raw.name = name or slugify(served or (slug if isinstance(slug, str) else None) or title)
    return raw


def _about_env(where: str) -> bool:
    """A field (by its place, `a.b[1]`) whose top-level name says it is the environment."""
    top = re.split(r"[.\[]", where, maxsplit=1)[0]
    return top in FIELD_NAMES["env"] or "env" in top.lower()


def _other_prose(data: dict[str, Any]) -> list[str]:
    """Other fields about the environment (`environment_notes`, `env_setup`, ...): their KEY=VALUE settings count."""
    return [v for k, v in data.items() if "env" in k.lower() and k not in FIELD_NAMES["env"] and isinstance(v, str)]
