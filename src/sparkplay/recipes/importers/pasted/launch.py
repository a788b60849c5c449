"""A Launch (an engine start found in a command line, a script, a compose service or a page) as a RawRecipe.

Everything docker was asked around the engine is read against sparkplay's own engine container (the same rules
as sparkrun's executor_config, recipes/importers/sparkrun/executor.py): what it already has needs nothing, what the
recipe boundary lets a recipe set is mapped, and the rest is named as not applied. A value the text leaves to
its reader's shell ($VAR, $(...)) never becomes a recipe's value.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from sparkplay import argv
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline, hooks, secrets
from sparkplay.recipes.importers.pasted import docker_run, shell, volumes
from sparkplay.recipes.importers.pasted.docker_run import ELSEWHERE, LIFECYCLE, Container
from sparkplay.recipes.importers.pasted.launches import Found, Launch
from sparkplay.recipes.importers.sparkrun import executor as sparkrun_executor
from sparkplay.recipes.model import slugify
from sparkplay.recipes.raw import RawRecipe

SECRET = secrets.ENV_NAME  # an environment name that holds a secret: never written into a recipe
# what sparkplay's engine container already is (engines/context.py), as docker run options
EXECUTOR_OPTIONS = {
    "--gpus": "gpus",
    "--ipc": "ipc",
    "--network": "network",
    "--net": "network",
    "--device": "devices",
    "--cap-add": "cap_add",
    "--ulimit": "ulimit",
    "--user": "user",
}
HANDLED = {*"--env --volume --mount --publish --shm-size --entrypoint --runtime _entrypoint_note".split(), ELSEWHERE}
GPU_RUNTIMES = ("nvidia",)


# engines a pasted text may launch that sparkplay does not serve yet: named in the refusal by what they are
NOT_YET = {
    "text-generation-launcher": "Text Generation Inference (`text-generation-launcher`)",
    "ollama": "Ollama (`ollama serve`)",
}
PRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\uffff]|[\ufffd\ue000-\uf8ff]")  # what a one-line error may show
DASHES = ("\u2013", "\u2014", "\u2012", "\u2212")  # what a web page makes of `--`


def pick(found: Found, choice: int | None, where: str, shape: str = "shell text") -> list[Launch]:
    """The launches to import: all of a compose file's services, or the one a text holds or `--pick` names."""
    launches = found.launches
    if not launches:
        if found.elsewhere:
            raise BadInput(
                f"{where}: no engine command to import: {found.elsewhere[0]}",
                "import the file that holds the engine's command instead, or write that command in the text",
            )
        programs = ", ".join(dict.fromkeys(PRINTABLE.sub("?", shell.shown(p))[:60] for p in found.ignored[:8]))
        shown = f" (it runs {programs})" if found.ignored else ""
        known = [NOT_YET[p.rsplit("/", 1)[-1]] for p in found.ignored if p.rsplit("/", 1)[-1] in NOT_YET]
        if known:  # an engine sparkplay knows of but does not serve: named first, not lost among the rest
            raise BadInput(
                f"{where} launches {known[0]}, which sparkplay does not serve yet{shown}",
                f"serve the model with {', '.join(s.title for s in registry.specs().values())} (a recipe for one of "
                "them), or wait for the engine's package",
            )
        raise BadInput(
            f"{where} is {shape}, not a recipe, and holds no engine command sparkplay can read{shown}",
            f"give an engine's serve command line ({registry.command_help()}), with "
            "or without docker run/exec around it, a compose file, or a page with the command in a code block",
        )
    if choice is not None:
        if not 1 <= choice <= len(launches):
            raise BadInput(
                f"--pick {choice}: {where} holds {len(launches)} engine command(s)",
                f"pick one from 1 to {len(launches)}",
            )
        return [launches[choice - 1]]
    return launches


def listing(found: Found) -> str:
    return "; ".join(f"{i}) {launch.label()}" for i, launch in enumerate(found.launches, 1))


def _around(raw: RawRecipe, launch: Launch) -> dict[str, str]:
    """The container around the engine, as sparkplay takes it: its image and options where the engine runs in
    one, said as not used where it runs from the node's packages; the environment docker gives the engine."""
    env: dict[str, str] = {}
    container = launch.container
    if container is not None and not sparkrun_executor.in_container(raw.engine):
        raw.note(
            "engine.image",
            "ignored",
            f"sparkplay runs {raw.engine} from the node's packages, not in a "
            f"container: the image {container.image or '(unknown)'} and docker's options around it are not "
            "used",
        )
        env.update(_container_env(container, raw))
    elif container is not None:
        env.update(_container_env(container, raw))
        raw.image, raw.image_unnamed = container.image or None, not (container.image or ELSEWHERE in container.options)
        _container(container, raw)
    elif sparkrun_executor.in_container(raw.engine):
        raw.note(
            "engine.image",
            "derived",
            "the command runs the engine outside a container (from the host's own install): sparkplay runs "
            "it in a container of the engine's image",
        )
    return env


def _before(raw: RawRecipe, launch: Launch) -> None:
    """What the text runs before the engine: the container's shell's commands (a preamble, a privileged
    request) and the text's other commands (said, not applied)."""
    if launch.preamble:
        raw.preamble = {"commands": launch.preamble, "sha256": hooks.digest(launch.preamble)}
        raw.note(
            "engine.preamble",
            "derived",
            f"the container's shell runs {len(launch.preamble)} command(s) before "
            f"the engine (sha256 {raw.preamble['sha256'][:12]}): a privileged request, run in the engine's "
            "container on every rank only where the inventory allows it",
        )
    if launch.before:
        raw.note(
            "serve.args",
            "ignored",
            "not applied: the text's other commands before the engine: "
            + "; ".join(c[:60] for c in launch.before[:6])
            + (" ..." if len(launch.before) > 6 else ""),
        )


def to_raw(launch: Launch, source: dict[str, Any], name: str | None) -> RawRecipe:
    # a secret flag goes before anything reads the words: `--hf-token $HF_TOKEN` is left out, not refused
    launch.command, left_out = secrets.without_flags(launch.command)
    unsettled = _unsettled_env(launch)
    launch.command, program = shell.program_named(launch.command)
    tagged = docker_run.placeholder_tag(launch.container)
    _check_settled(launch)
    for word in launch.command:
        if word.startswith(DASHES):
            raise BadInput(
                f"the command at {launch.where} has {word[:30]!r}, whose dash is a typographic one (a web "
                "page's rendering of --)",
                "write the flag with two hyphens (--)",
            )
    parsed = cmdline.parse(shlex.join(launch.command))
    raw = RawRecipe(
        name="",
        title="",
        source=source,
        engine=parsed.engine,
        model=parsed.model,
        args=parsed.args,
        pinning=parsed.pinning,
    )
    for key, how, detail in launch.notes:
        raw.note(key, how, detail)
    for flag in left_out:
        raw.note("serve.args", "ignored", secrets.note(flag))
    for said in unsettled:
        raw.note("serve.env", "ignored", said)
    for note in filter(None, (program, tagged)):
        raw.note(*note)
    _per_rank(raw, launch)
    raw.note("serve.args", "derived", f"the engine command at {launch.where}")
    env = {**launch.env, **parsed.env, **_around(raw, launch)}
    raw.env = _without_secrets(env, raw)
    raw.nodes = launch.nodes
    _before(raw, launch)
    spec = registry.spec(parsed.engine)
    served = argv.flag_value(parsed.args, *spec.served_name_flags) if spec.served_name_flags else None
    raw.title = served or parsed.model or launch.name_hint or parsed.engine
    hint = launch.name_hint if launch.name_hint and not shell.unknowns(launch.name_hint) else None
    hub = spec.hub_model(parsed.args)
    model_name = (parsed.model or (hub or "").split(":")[0]).rstrip("/").rsplit("/", 1)[-1] or None
    raw.name = name or slugify(served or hint or model_name or parsed.engine)
    return raw


def _per_rank(raw: RawRecipe, launch: Launch) -> None:
    """One node's command of a multi-node guide: its per-rank flags are sparkplay's to set; --nnodes counts."""
    count = raw.drop_per_rank()
    if count and count.isdigit() and launch.nodes is None:
        launch.nodes = int(count)


# what a login shell always sets: a value built on them names the author's own account, not a setting
LOGIN = frozenset({"HOME", "USER", "LOGNAME"})


def _unsettled_env(launch: Launch) -> list[str]:
    """The environment settings whose value the text leaves to the shell that runs it (`-e UID=$(id -u)`,
    `CACHE=$HOME/.cache`), taken out of the launch, each with why: like docker's `-e NAME`, the text does not
    say them. (A secret's are left for the secret rule; a flag's unsettled value is refused, not dropped.)"""
    said = []

    def settled(key: str, value: str) -> bool:
        if SECRET.search(key) or not (names := shell.unknowns(value)):
            return True
        if launch.container is None and set(names) <= LOGIN:  # `$HOME/.cache/...` of an engine run on the host
            said.append(
                f"{key}={shell.shown(value)}: a path in the home of whoever ran the engine on the host; "
                "not applied (the engine's container keeps its own)"
            )
        else:
            said.append(
                f"{key}={shell.shown(value)[:60]}: its value comes from the shell that runs the text, "
                f"which the text does not say; not applied (import with --set serve.env.{key}=VALUE)"
            )
        return False

    launch.env = {k: v for k, v in launch.env.items() if settled(k, v)}
    if launch.container is not None and launch.container.values("--env"):
        launch.container.options["--env"] = [
            e for e in launch.container.values("--env") if "=" not in e or settled(*e.split("=", 1))
        ]
    return said


def _check_settled(launch: Launch) -> None:
    """A word the text leaves to its reader's shell cannot be a recipe's: refused, naming it."""
    fields = [*launch.command, *(f"{k}={v}" for k, v in launch.env.items() if not SECRET.search(k))]
    if launch.container is not None:
        fields.append(launch.container.image)
        fields += [e for e in launch.container.values("--env") if "=" in e and not SECRET.search(e.split("=")[0])]
    for text in fields:
        if names := shell.unknowns(text):
            unset = names[0]
            if unset.startswith(("$(", "`")):
                raise BadInput(
                    f"the command at {launch.where} uses a command substitution ({shell.shown(text)[:80]}), "
                    "whose value only running it would give",
                    "write its value in its place",
                )
            what = f"${unset.lstrip('$')}"
            raise BadInput(
                f"the command at {launch.where} uses {what}, which the text never sets ({shell.shown(text)[:80]})",
                f"set it in the text before the command (NAME=value) or write its value in place of {what}",
            )
    for text in fields:
        if m := re.search(docker_run.PLACEHOLDER, text):
            raise BadInput(
                f"the command at {launch.where} holds the placeholder {m.group(0)} ({text[:80]})",
                f"replace {m.group(0)} with its value in the text",
            )
    if elided := [w for w in launch.command if w in ("...", "\u2026", "[...]", "[\u2026]")]:  # `vllm serve M ...`
        raise BadInput(
            f"the command at {launch.where} holds {elided[0]} where the text leaves out the rest of it",
            "give the whole command, every flag written out",
        )


def _container_env(container: Container, raw: RawRecipe) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in container.values("--env"):
        name, eq, value = entry.partition("=")
        if not eq:
            raw.note(
                "serve.env",
                "ignored",
                f"{name}: docker takes it from the environment of whoever runs the "
                f"command; not in the text, so not applied (import with --set "
                f"serve.env.{name}=VALUE)",
            )
            continue
        env[name] = value
    for path in container.values("--env-file"):
        raw.note(
            "serve.env",
            "ignored",
            f"--env-file {shell.shown(path)}: a file on the machine the text was "
            "run on, not in the text: its settings are not applied (import with --set "
            "serve.env.NAME=VALUE)",
        )
    return env


def _without_secrets(env: dict[str, str], raw: RawRecipe) -> dict[str, str]:
    kept = {}
    for name, value in env.items():
        if SECRET.search(name):
            raw.note("serve.env", "ignored", secrets.note(name))
        elif shell.unknowns(value):
            raw.note(
                "serve.env",
                "ignored",
                f"{name}: its value {shell.shown(value)} comes from the shell of "
                f"whoever runs the text; not applied (import with --set serve.env.{name}=VALUE)",
            )
        else:
            kept[name] = value
    return kept


def _executor(options: dict[str, list[str]]) -> dict[str, Any]:
    """docker's options as sparkrun's executor_config (its reader maps them to the container's limits)."""
    executor: dict[str, Any] = {}
    for option, key in EXECUTOR_OPTIONS.items():
        values = [shell.shown(v) for v in options.get(option, [])]
        if not values:
            continue
        executor[key] = values if key in ("devices", "cap_add", "ulimit") else values[-1]
    if options.get("--runtime"):
        runtime = options["--runtime"][-1]
        if runtime in GPU_RUNTIMES:
            executor.setdefault("gpus", "all")
        else:
            executor["runtime"] = runtime
    if executor.get("gpus") is not None:
        executor["gpus"] = str(executor["gpus"]).strip("\"'")
    return executor


def _not_applied(options: dict[str, list[str]], left: dict[str, Any], raw: RawRecipe) -> None:
    """docker's other options and its lifecycle ones, kept in `left` and said: none reaches the container."""
    others = sorted(k for k in options if k not in EXECUTOR_OPTIONS and k not in HANDLED and k not in LIFECYCLE)
    for option in others:
        left[option.lstrip("-")] = [shell.shown(v) for v in options[option]]
        raw.note(
            f"extra.docker.{option.lstrip('-')}",
            "ignored",
            f"docker {option} {' '.join(options[option])}: "
            "not applied: sparkplay's engine container is never privileged and takes no other docker option "
            "from a recipe (docs/security.md)",
        )
    if life := sorted(k for k in options if k in LIFECYCLE):
        left["lifecycle"] = life
        raw.note(
            "extra.docker.lifecycle",
            "ignored",
            f"{', '.join(life)}: the container's life and name are "
            "sparkplay's systemd unit's (it starts, restarts and removes it)",
        )


def _container(container: Container, raw: RawRecipe) -> None:
    """docker's options around the engine, against sparkplay's own container."""
    options = container.options
    if "_entrypoint_note" in options:
        raw.note(
            "serve.args",
            "derived",
            f"{container.image} runs what its command gives after its entrypoint, "
            "which sparkplay does not know: the engine's flags say it is "
            f"`{options['_entrypoint_note'][-1]}`",
        )
    mapped = sparkrun_executor.read(_executor(options), raw.engine)
    raw.ulimits, raw.container_user = mapped.ulimits, mapped.user
    left: dict[str, Any] = raw.extra.setdefault("docker", {})  # what docker was asked and sparkplay leaves
    left.update(mapped.left)
    for key, value in mapped.left.items():
        raw.note(
            f"extra.docker.{key}",
            "ignored",
            f"{key} {value}: not applied: sparkplay's engine container has "
            "the host's network and IPC, every GPU, the RDMA devices and IPC_LOCK, and no other capability, "
            "device or privilege a recipe asks (docs/security.md)",
        )
    if (shm := options.get("--shm-size")) and sparkrun_executor.in_container(raw.engine):
        raw.shm_size = shm[-1]
    for spec in [*options.get("--volume", []), *options.get("--mount", [])]:
        left.setdefault("volume", []).append(shell.shown(spec))
        raw.note("extra.docker.volume", "ignored", volumes.mount_note(shell.shown(spec)))
    volumes.files_in([shell.shown(s) for s in [*options.get("--volume", []), *options.get("--mount", [])]], raw)
    _ports(options.get("--publish", []), raw)
    _not_applied(options, left, raw)


def _ports(specs: list[str], raw: RawRecipe) -> None:
    """docker -p [IP:]HOST:CONTAINER: with the host's network, the engine listens on the host's port itself."""
    engine_port = argv.flag_value(raw.args, "--port")
    container_port = (
        int(engine_port) if engine_port and engine_port.isdigit() else registry.spec(raw.engine).defaults.port
    )
    for spec in specs:
        parts = shell.shown(spec).split("/", 1)[0].rsplit(":", 2)
        if len(parts) < 2 or not parts[-1].isdigit():
            continue
        host_port = parts[-2]
        if int(parts[-1]) != container_port or not host_port.isdigit():
            continue
        if len(parts) == 3 and parts[0]:
            raw.bind = parts[0].strip("[]")
            raw.note("serve.bind", "derived", f"docker -p {spec}: the API is published on {raw.bind}")
        if int(host_port) != container_port:
            raw.port = int(host_port)
            raw.args = argv.with_flag(raw.args, "--port", host_port) if engine_port else raw.args
            raw.note(
                "serve.port",
                "derived",
                f"docker -p {spec} publishes the engine's port {container_port} as "
                f"{host_port}: sparkplay runs the engine on the host's network, so it listens on "
                f"{host_port}",
            )
