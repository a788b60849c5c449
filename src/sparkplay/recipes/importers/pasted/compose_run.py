"""A script that runs `docker compose [-f FILE] run|up [options] SERVICE [COMMAND...]` (or `docker-compose`): the
service it names, from the compose file beside it.

The file is the one `-f` names, else the one Compose finds in the script's folder (compose.yaml, compose.yml,
docker-compose.yaml, docker-compose.yml, in that order). `run`'s own command replaces the service's, and its
`-e NAME=VALUE` adds to its environment, as Compose runs it; its other options (ports, names, volumes, detach)
are named as not applied, since sparkplay's units decide them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sparkplay.errors import BadInput
from sparkplay.recipes import model
from sparkplay.recipes.importers.pasted import compose, shell
from sparkplay.recipes.importers.pasted.launches import Found

DEFAULT_FILES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
# compose's global options that take a value, and run's
GLOBAL_VALUED = {"-f", "--file", "-p", "--project-name", "--project-directory", "--env-file", "--profile"}
RUN_VALUED = set(
    "-e --env -p --publish --name --entrypoint -u --user -v --volume -w --workdir -l --label --cap-add --cap-drop "
    "--pull".split()
)


def read(words: list[str], at: str) -> dict[str, Any]:
    """The words after `docker compose` (or `docker-compose`): {files, verb, service, command, env, not_applied}."""
    got: dict[str, Any] = {"files": [], "verb": None, "service": None, "command": [], "env": {}, "not_applied": []}
    rest = list(words)
    while rest and rest[0].startswith("-"):
        name, eq, inline = rest.pop(0).partition("=")
        value = inline if eq else (rest.pop(0) if name in GLOBAL_VALUED and rest else "")
        if name in ("-f", "--file"):
            got["files"].append(value)
    if not rest or rest[0] not in ("run", "up", "create", "start"):
        raise BadInput(
            f"{at} runs docker compose {rest[0] if rest else ''}, which starts no service it names",
            "import the compose file itself",
        )
    got["verb"] = rest.pop(0)
    while rest and rest[0].startswith("-"):
        word = rest.pop(0)
        name, eq, inline = word.partition("=")
        value = inline if eq else (rest.pop(0) if name in RUN_VALUED and rest else None)
        if name in ("-e", "--env") and value is not None and got["verb"] == "run":
            key, sep, val = value.partition("=")
            if not sep:
                raise BadInput(f"{at}: docker compose run -e {value!r} is not NAME=VALUE", "write -e NAME=VALUE")
            got["env"][key] = val
        else:
            got["not_applied"].append(word if value is None else f"{name} {value}")
    if not rest:
        raise BadInput(f"{at} runs docker compose {got['verb']} with no service named", "import the compose file")
    got["service"] = rest.pop(0)
    if got["verb"] == "up" and rest:
        got["not_applied"] += [f"the other services {', '.join(rest)}"]
    elif rest:
        got["command"] = rest
    return got


def compose_file(files: list[str], where: str, at: str) -> Path:
    folder = Path(where).parent if "://" not in where else None
    wanted = files[:1] or list(DEFAULT_FILES)
    if folder is not None:
        for name in wanted:
            path = folder / name
            if not Path(name).is_absolute() and ".." not in Path(name).parts and path.is_file():
                return path
    raise BadInput(
        f"{at} runs docker compose on {' or '.join(wanted)}, which is not beside {where}",
        "import the compose file itself, or import the script from the folder that holds it",
    )


def find(words: list[str], at: str, where: str) -> tuple[Found, Path, dict[str, Any]]:
    """The launch of the service the script starts, from its compose file (as Compose would run it)."""
    asked = read(words, at)
    path = compose_file(asked["files"], where, at)
    data = model.parsed(lambda: yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
    if not compose.is_compose(data) or asked["service"] not in data["services"]:
        raise BadInput(
            f"{at} runs the service {shell.shown(asked['service'])}, which {path} does not define",
            "import the compose file itself and pick its service with --pick N",
        )
    spec = dict(data["services"][asked["service"]] or {})
    # what the command line gives, the shell already expanded: Compose interpolates its file, not these
    if asked["command"]:
        spec["command"] = [word.replace("$", "$$") for word in asked["command"]]
    if asked["env"]:
        env = spec.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
        spec["environment"] = {**env, **{key: value.replace("$", "$$") for key, value in asked["env"].items()}}
    found = compose.find({**data, "services": {asked["service"]: spec}}, str(path), path.parent)
    said = [f"read through {at}: docker compose {asked['verb']} {asked['service']} from {path}"]
    if asked["command"]:
        said.append(f"docker compose run's command replaces the service's: {shell.shown(' '.join(asked['command']))}")
    if asked["not_applied"]:
        said.append("not applied, as sparkplay's units decide them: " + ", ".join(asked["not_applied"]))
    for launch in found.launches:
        launch.notes += [("serve.args", "derived", words) for words in said]
    return found, path, asked
