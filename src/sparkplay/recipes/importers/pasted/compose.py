"""A docker compose file (the Compose Specification): each service that runs an engine is a Launch.

A service's fields are read as the `docker run` options they are (the specification's own correspondence:
environment is --env, volumes --volume, ports --publish, ipc --ipc, ...), so one set of rules
(pasted/launch.py) decides what sparkplay maps and what it names as not applied. Variables are interpolated
as Compose does (`${VAR:-default}`, `$$`), from the file and its project's `.env` (its secrets never read): a
value left to the machine's environment is unknown, and refused where the engine would need it.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.fsutil import read_small_text
from sparkplay.recipes import secrets
from sparkplay.recipes.importers.pasted import launches, shell
from sparkplay.recipes.importers.pasted.docker_run import Container
from sparkplay.recipes.importers.pasted.launches import Found
from sparkplay.recipes.importers.pasted.shell_words import Piece, Word

# service keys -> the docker run option each is
OPTIONS = {
    "ipc": "--ipc",
    "network_mode": "--network",
    "shm_size": "--shm-size",
    "user": "--user",
    "runtime": "--runtime",
    "pid": "--pid",
    "privileged": "--privileged",
    "container_name": "--name",
    "restart": "--restart",
    "working_dir": "--workdir",
    "platform": "--platform",
    "userns_mode": "--userns",
    "mem_limit": "--memory",
    "cpus": "--cpus",
    "hostname": "--hostname",
    "stop_signal": "--stop-signal",
    "init": "--init",
    "tty": "--tty",
    "stdin_open": "--interactive",
    "read_only": "--read-only",
}
LISTS = {
    "cap_add": "--cap-add",
    "cap_drop": "--cap-drop",
    "devices": "--device",
    "security_opt": "--security-opt",
    "env_file": "--env-file",
    "tmpfs": "--tmpfs",
    "extra_hosts": "--add-host",
    "group_add": "--group-add",
    "dns": "--dns",
    "sysctls": "--sysctl",
}
# what only the project's own wiring or the container's life is about
QUIET = {
    "image",
    "command",
    "entrypoint",
    "environment",
    "volumes",
    "ports",
    "ulimits",
    "deploy",
    "build",
    "expose",
    "depends_on",
    "healthcheck",
    "labels",
    "logging",
    "networks",
    "profiles",
    "links",
    "stop_grace_period",
    "pull_policy",
    "annotations",
    "develop",
    "scale",
    "attach",
}

MAX_DOTENV = 64 * 1024  # a project's .env: settings, small


def is_compose(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("services"), dict) and "schema" not in data


def interpolate(value: Any, given: dict[str, str] | None = None) -> Any:
    """Compose's interpolation over every string: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, $$;
    `given`: the project's `.env`."""
    if isinstance(value, str):
        if "$" not in value:
            return value
        escaped = value.replace("$$", "\ue001")
        text = shell.Variables(given).text(Word([Piece(escaped, True, True)]))
        return text.replace("\ue001", "$")
    if isinstance(value, list):
        return [interpolate(v, given) for v in value]
    if isinstance(value, dict):
        return {str(k): interpolate(v, given) for k, v in value.items()}
    return value


def dotenv(folder: Path | None) -> tuple[dict[str, str], str | None]:
    """The `.env` of the compose project's folder, as Compose reads it for interpolation, and what the import
    says of it: a regular text file (a link is not followed) of NAME=value lines, read by the shell reader;
    a secret's name, and a value it leaves to the machine, are never read from it."""
    path = folder / ".env" if folder is not None else None
    if path is None or not path.exists():
        return {}, None
    body = read_small_text(path, MAX_DOTENV)
    try:
        scalars = {} if body is None else shell.read(body.decode("utf-8", "replace")).variables.scalars
    except BadInput:
        scalars = {}
    kept = {k: v for k, v in scalars.items() if not secrets.ENV_NAME.search(k) and not shell.unknowns(v)}
    if not kept:
        return {}, f"{path} not read: no plain NAME=value settings in a small regular file"
    left = sorted(set(scalars) - set(kept))
    unread = f"; not read from it: {', '.join(left)} (a secret, or a value the machine gives)" if left else ""
    return kept, f"interpolated with {path} ({', '.join(kept)}), as Compose reads its project's .env{unread}"


def find(data: dict[str, Any], where: str, folder: Path | None = None) -> Found:
    """Each engine service a Launch; `folder`: the project's, whose `.env` Compose interpolates from."""
    found = Found(together=True)
    given, said = dotenv(folder)
    for service, spec in data["services"].items():
        if not isinstance(spec, dict):
            raise BadInput(f"{where}: service {service} is not a mapping", "fix the compose file")
        spec = interpolate(spec, given)
        at = f"service {service}"
        image = spec.get("image")
        if not isinstance(image, str):
            image = ""
        container = Container(image, _words(spec.get("command"), at), _options(spec, at))
        if spec.get("entrypoint") is not None:
            container.options["--entrypoint"] = [shlex.join(_words(spec["entrypoint"], at))]
        count = len(found.launches)
        command = launches._container_command(container, at)
        if command is not None:
            launches._inside(command, at, container, found, 0)
        if len(found.launches) == count:
            what = image or "a built image"
            found.ignored.append(f"service {service} ({what})")
            if command is None and image and registry.by_image_name(image):  # an engine's image starts it
                found.elsewhere.append(
                    f"{at} runs what its image {image} starts (the file gives it no command: or entrypoint:), which "
                    "the file does not hold"
                )
            continue
        for launch in found.launches[count:]:
            launch.name_hint = str(service)
            launch.notes += _notes(spec, service) + ([("source", "derived", said)] if said else [])
    return found


def _notes(spec: dict[str, Any], service: str) -> list[tuple[str, str, str]]:
    notes = []
    if spec.get("build") is not None:
        how = f"its image {spec['image']} is" if spec.get("image") else "its image is"
        notes.append(
            (
                "engine.image",
                "ignored",
                f"service {service}: {how} built from the compose file's build: "
                "section, not pulled: build it under that tag on every node first, or --set engine.image "
                "to a published image",
            )
        )
    others = sorted(
        k for k in spec if k not in QUIET and k not in OPTIONS and k not in LISTS and not k.startswith("x-")
    )
    for key in others:
        notes.append((f"extra.compose.{key}", "ignored", f"service {service}: compose's {key} is not applied"))
    return notes


def _words(value: Any, at: str) -> list[str]:
    """A command or entrypoint: a list as it is, a string split as Compose splits it (shell words, no shell)."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        return shlex.split(str(value))
    except ValueError as exc:
        raise BadInput(f"{at}: its command cannot be split into words ({exc})", "fix its quotes") from None


def _options(spec: dict[str, Any], at: str) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for key, option in OPTIONS.items():
        value = spec.get(key)
        if value is not None and value is not False:
            options[option] = [str(value).lower() if isinstance(value, bool) else str(value)]
    for key, option in LISTS.items():
        value = spec.get(key)
        if isinstance(value, dict):
            options[option] = [f"{k}={v}" for k, v in value.items()]
        elif value:
            options[option] = [str(v) for v in (value if isinstance(value, list) else [value])]
    options["--env"] = _environment(spec.get("environment"))
    options["--volume"] = [_volume(v) for v in _listed(spec, "volumes", at)]
    options["--publish"] = [_port(p) for p in _listed(spec, "ports", at)]
    ulimits = spec.get("ulimits") or {}
    if isinstance(ulimits, dict):
        options["--ulimit"] = [_ulimit(k, v) for k, v in ulimits.items()]
    if _gpus(spec):
        options["--gpus"] = ["all"]
    return {k: v for k, v in options.items() if v}


def _environment(value: Any) -> list[str]:
    if isinstance(value, dict):  # a null value is taken from the machine's environment: docker's bare -e NAME
        return [
            str(k) if v is None else f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in value.items()
        ]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _volume(value: Any) -> str:
    if isinstance(value, dict):
        return f"{value.get('source', '')}:{value.get('target', '')}"
    return str(value)


def _port(value: Any) -> str:
    if isinstance(value, dict):
        host_ip = f"{value['host_ip']}:" if value.get("host_ip") else ""
        return f"{host_ip}{value.get('published', value.get('target'))}:{value.get('target')}"
    text = str(value)
    return text if ":" in text else f"{text}:{text}"


def _ulimit(name: str, value: Any) -> str:
    if isinstance(value, dict):
        return f"{name}={value.get('soft')}:{value.get('hard')}"
    return f"{name}={value}"


def _listed(spec: dict[str, Any], key: str, at: str) -> list[Any]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadInput(f"{at}: {key} must be a list, got {type(value).__name__}", f"write {key} as a YAML list")
    return value


def _gpus(spec: dict[str, Any]) -> bool:
    """deploy.resources.reservations.devices asking for GPUs (the specification's way of giving them)."""
    node: Any = spec
    for key in ("deploy", "resources", "reservations", "devices"):
        node = node.get(key) if isinstance(node, dict) else None
    devices = node if isinstance(node, list) else []
    return any(isinstance(d, dict) and ("gpu" in _capabilities(d) or d.get("driver") == "nvidia") for d in devices)


def _capabilities(device: dict[str, Any]) -> list[Any]:
    value = device.get("capabilities")
    return value if isinstance(value, list) else []
