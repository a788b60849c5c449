"""Engine launches in pasted shell text: a command line, `docker run`/`docker exec` around it, `bash -c '...'`
inside those, `ssh HOST "..."`, eugr's `launch-cluster.sh ... exec ...`, and a script of such lines.

The text is read by pasted.shell (never run); each statement that starts an engine (by the engines' own command
grammar, sparkplay.recipes.cmdline) becomes a Launch, with what docker was asked around it; others are named.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

from sparkplay import imageref
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline
from sparkplay.recipes.importers.pasted import docker_run, launch_script, shell
from sparkplay.recipes.importers.pasted.docker_run import Container

SHELLS = ("bash", "sh", "zsh", "dash")
SHELL_ONLY = [[shell] for shell in SHELLS]  # a container's command that is a bare shell
# the programs a statement may run the real command under, and their options that take a value
WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset("-u -g -h -p -C -D -r -t -U -T".split()),
    "nice": frozenset({"-n"}),
    "ionice": frozenset({"-c", "-n"}),
    "env": frozenset({"-u", "-C", "-S"}),
    "timeout": frozenset({"-s", "-k"}),
    "uvx": frozenset({"--with", "--from", "-p", "--python"}),
    **dict.fromkeys(("nohup", "exec", "time", "command", "stdbuf", "unbuffer"), frozenset()),
}
UV_RUN_VALUED = set("--with --python -p --project --directory --env-file --group --extra".split())
DOCKERS = ("docker", "podman", "nvidia-docker")
# the entrypoint of the images whose command is only the engine's arguments (their Dockerfiles' ENTRYPOINT)
ENTRYPOINTS = {"vllm/vllm-openai": ("vllm", "serve")} | dict.fromkeys(
    ("ghcr.io/ggml-org/llama.cpp", "ghcr.io/ggerganov/llama.cpp"), ("llama-server",)
)
SSH_VALUED = set("BbcDEeFIiJLlmOopQRSWw")
EUGR_VALUED = set(
    "-n --nodes -t --name --eth-if --ib-if --apply-mod -e --env --launch-script --mem-limit-gb --mem-swap-limit-gb "
    "--pids-limit --shm-size-gb".split()
)
IDLE = ("sleep", "tail", "bash", "sh", "/bin/bash", "/bin/sh")


# the launchers read by what they are (vLLM's Ray node script, eugr's launcher and recipe runner), run by a shell too
KNOWN_SCRIPTS = ("run_cluster", "launch-cluster", "run-recipe")
# an engine's flags that print and exit: the command serves nothing
INFORMATIONAL = frozenset({"--version", "--help", "-h", "--list-devices", "--help=all"})


@dataclass
class Launch:
    """One engine start the text asks for, and everything around it."""

    command: list[str]  # the engine's command words, program first
    where: str
    env: dict[str, str] = field(default_factory=dict)
    container: Container | None = None  # the docker run the engine runs in (its image and options)
    nodes: int | None = None
    name_hint: str | None = None  # the container's or service's name
    preamble: list[str] = field(default_factory=list)  # commands its container's shell runs before it
    before: list[str] = field(default_factory=list)  # the text's other commands before it
    operators: list[str] = field(default_factory=list)  # what the shell does around those (a pipe, a redirect)
    after: list[str] = field(default_factory=list)  # the text's commands after it
    notes: list[tuple[str, str, str]] = field(default_factory=list)

    def label(self) -> str:
        text = shell.shown(shlex.join(self.command))
        image = f" in {self.container.image}" if self.container else ""
        return f"{self.where}: {text[:110] + '...' if len(text) > 110 else text}{image}"


@dataclass
class Found:
    launches: list[Launch] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # other programs the text runs, named
    elsewhere: list[str] = field(default_factory=list)  # why the engine may be in a file the text does not hold
    containers: dict[str, Container] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # the images of the Ray nodes run_cluster.sh starts, in order
    shell: Container | None = None  # the container an interactive `docker run -it IMAGE bash` opened
    wrappers: list[tuple[list[str], str]] = field(default_factory=list)  # run-recipe's words after it, where
    compose_runs: list[tuple[list[str], str]] = field(default_factory=list)  # docker compose's words after it
    together: bool = False  # its launches run side by side (a compose file's services), not one of them
    read_as: list[str] = field(default_factory=list)  # how the text was read (no arguments, no conditions)


def find(
    text: str,
    where: str = "line",
    given: dict[str, str] | None = None,
    into: Found | None = None,
    depth: int = 0,
    origin: shell.Origin | None = None,
) -> tuple[Found, shell.Variables]:
    """Every engine launch in a shell text, in order (`into`: what a page's earlier blocks found, their containers;
    `origin`: the file a script was read from, its arguments and what it may source)."""
    script = shell.read(text, given, origin)
    found = into if into is not None else Found()
    first = len(found.launches)
    exported: dict[str, str] = {}
    earlier: list[str] = []
    operators: list[str] = []
    for statement in script.statements:
        words = statement.words
        if words[:1] in (["export"], ["declare"], ["readonly"]):
            exported.update(w.split("=", 1) for w in words[1:] if "=" in w and not w.startswith("-"))
            continue
        count = len(found.launches)
        _statement(words, f"{where} {statement.line}", dict(exported), found, depth)
        for launch in found.launches[count:]:
            launch.before, launch.operators = list(earlier), list(operators)
            if statement.piped or statement.redirected or statement.background:
                launch.notes.append(
                    (
                        "serve.args",
                        "ignored",
                        "the text pipes, redirects or backgrounds the engine's "
                        "output: sparkplay's unit runs it in the foreground and its journal keeps "
                        "the output",
                    )
                )
        if len(found.launches) > count or words[:1] in (["set"], ["cd"]):
            continue
        text = shell.shown(shlex.join(words))
        for launch in found.launches[first:]:
            launch.after.append(text)
        earlier.append(text)
        if statement.piped or statement.redirected or statement.background:
            operators.append(text)
    found.read_as += script.said()
    for launch in found.launches[first:]:
        launch.notes += [("serve.args", "derived", text) for text in found.read_as]
    return found, script.variables


def _unwrap(words: list[str], env: dict[str, str]) -> list[str]:
    """The command under sudo/env/nohup/exec... and leading NAME=VALUE words (into env)."""
    at = 0
    while at < len(words):
        if cmdline.ENV_ASSIGNMENT.match(words[at]):
            name, _, value = words[at].partition("=")
            env[name] = value
            at += 1
            continue
        program = posixpath.basename(words[at])
        if program == "uv" and words[at + 1 : at + 2] == ["run"]:  # uv run [options] COMMAND, in uv's environment
            at, valued = at + 1, UV_RUN_VALUED
        elif program not in WRAPPERS:
            return words[at:]
        else:
            valued = WRAPPERS[program]
        at += 1
        while at < len(words) and words[at].startswith("-"):
            at += 2 if words[at] in valued else 1
        if program == "timeout" and at < len(words):
            at += 1  # its duration
    return []


def _statement(words: list[str], at: str, env: dict[str, str], found: Found, depth: int = 0) -> None:
    if depth > 4:
        raise BadInput(f"{at}: commands nested more than four deep (ssh, docker, bash -c)", "give the engine's line")
    words = _unwrap(words, env)
    if not words:
        return
    program = posixpath.basename(words[0])
    if program in DOCKERS or program == "docker-compose":  # Compose v1's own program is `docker compose`
        _docker(words[1:] if program in DOCKERS else ["compose", *words[1:]], at, env, found, depth)
    elif program in SHELLS and len(words) > 2 and re.fullmatch(r"-[a-z]*c[a-z]*", words[1]):
        _nested(words[2], at, env, None, found, depth)
    elif program in SHELLS and len(words) > 1 and posixpath.basename(words[1]).startswith(KNOWN_SCRIPTS):
        _statement(words[1:], at, env, found, depth + 1)  # `bash run_cluster.sh ...`: the script sparkplay reads
    elif program in SHELLS and len(words) > 1 and not words[1].startswith("-"):
        found.elsewhere.append(f"{at} runs the script {shell.shown(words[1])}, which the text does not hold")
    elif program == "ssh":
        host, command = _ssh(words[1:])
        if command:
            before = len(found.launches)
            _nested(" ".join(command), at, {}, None, found, depth)
            for launch in found.launches[before:]:
                launch.notes.append(
                    (
                        "topology.nodes",
                        "derived",
                        f"the text runs it on {shell.shown(host)} over ssh: "
                        "sparkplay runs it on the nodes its inventory gives",
                    )
                )
    elif program.startswith("launch-cluster"):
        _eugr(words[1:], at, env, found, depth)
    elif (program.startswith("run-recipe") or (program == "sparkrun" and words[1:2] == ["run"])) and len(words) > 1:
        recipe = next((w for w in words[1:] if not w.startswith("-") and w != "run"), "its recipe")
        found.wrappers += [(words[1:], at)] if program.startswith("run-recipe") else []
        found.elsewhere.append(
            f"{at} runs {program} on the recipe {shell.shown(recipe)} (sparkplay reads sparkrun's "
            "and eugr's recipe YAML itself)"
        )
    elif program.startswith("run_cluster") and len(words) > 1:
        found.nodes.append(words[1])  # vLLM's examples/online_serving/run_cluster.sh IMAGE HEAD_IP --head|--worker
        found.ignored.append(f"{program} (starts a Ray node of {words[1]})")
    elif program == "exit":
        found.shell = None  # the interactive container's shell ends: what follows runs on the host
    else:
        count = len(found.launches)
        _launch(words, at, env, found.shell, found)
        if found.shell is not None and len(found.launches) > count:
            said = f"the text opens a shell in {found.shell.image} (docker run -it ... bash) before it: it runs there"
            found.launches[-1].notes.append(("engine.image", "derived", said))


def _nested(text: str, at: str, env: dict[str, str], container: Container | None, found: Found, depth: int) -> None:
    """A command string another program runs (bash -c, ssh), with a container's environment (docker -e) in one."""
    given = container.environment() if container else None
    inner, _ = find(text, f"{at}, in its command: line", given, depth=depth + 1)
    found.ignored += inner.ignored
    found.elsewhere += inner.elsewhere
    found.images += inner.images
    found.nodes += inner.nodes
    found.containers.update(inner.containers)
    if not inner.launches:
        return
    for launch in inner.launches:
        launch.env = {**env, **launch.env}
        if container is not None:  # a shell in a container: what it runs first runs in the engine's container
            if launch.after:
                raise _container_script(f"{launch.after[0]!r} runs after the engine")
            if launch.operators:
                raise _container_script(f"{launch.operators[0]!r} uses a pipe, a redirect or & before the engine")
            launch.container = launch.container or container
            launch.preamble = launch.before
        launch.before = []
    found.launches += inner.launches


def _container_script(why: str) -> BadInput:
    return BadInput(
        f"the container's shell runs more than the engine: {why}",
        "reduce the container's command to the engine's line (settings exported and simple commands "
        "before it are fine: sparkplay runs those as a privileged request)",
    )


def _ssh(words: list[str]) -> tuple[str, list[str]]:
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if len(words[i]) == 2 and words[i][1] in SSH_VALUED else 1
    return (words[i], words[i + 1 :]) if i < len(words) else ("", [])


def _docker(words: list[str], at: str, env: dict[str, str], found: Found, depth: int) -> None:
    if words[:1] == ["container"]:
        words = words[1:]
    sub = words[0] if words else ""
    if sub == "run":
        container = docker_run.parse_run(words[1:], at)
        found.images.append(container.image)
        if name := container.last("--name"):
            found.containers[name] = container
        command = _container_command(container, at)
        if command is None:
            if container.values("--interactive") and [posixpath.basename(w) for w in container.command] in SHELL_ONLY:
                found.shell = container  # `docker run -it IMAGE bash`: the lines typed next run in it
            return  # an idle container (sleep infinity) for a later docker exec
        _inside(command, at, container, found, depth)
    elif sub == "exec":
        name, command, options = docker_run.parse_exec(words[1:])
        container, note = docker_run.exec_target(
            shell.shown(name), found.containers.get(name), found.images, found.nodes
        )
        exec_env = [*container.values("--env"), *options.get("--env", [])]
        container = Container(container.image, [], {**container.options, "--env": exec_env})
        before = len(found.launches)
        _inside(command, at, container, found, depth)
        for launch in found.launches[before:]:  # a container the shell finds at run time names nothing here
            launch.name_hint = launch.name_hint or (None if shell.unknowns(name) else name)
            if note:
                launch.notes.append(("engine.image", "derived", note))
    elif sub == "compose":
        found.compose_runs.append((words[1:], at))
        found.elsewhere.append(f"{at} runs docker compose: import the compose file itself")
    else:
        found.ignored.append(f"docker {sub}".strip())


def _inside(command: list[str], at: str, container: Container | None, found: Found, depth: int) -> None:
    """The command a container runs: the engine itself, or a shell running it."""
    if not command:
        return
    program = posixpath.basename(command[0])
    if program in SHELLS and len(command) > 2 and re.fullmatch(r"-[a-z]*c[a-z]*", command[1]):
        before = len(found.launches)
        _nested(command[2], at, {}, container, found, depth + 1)
        for launch in found.launches[before:]:
            launch.name_hint = launch.name_hint or (container.last("--name") if container else None)
        return
    # a shell running a script, or a script of the image run itself (its entrypoint): neither is in the text
    script = command[1] if program in SHELLS and len(command) > 1 else None
    if (script := script or (command[0] if program.endswith((".sh", ".bash")) else None)) is not None:
        found.elsewhere.append(
            f"{at} runs the script {shell.shown(script)} inside the container, which the text does not hold"
        )
        return
    _launch(command, at, {}, container, found)


def _launch(words: list[str], at: str, env: dict[str, str], container: Container | None, found: Found) -> None:
    """An engine's command; else a program named as ignored (no engine's, or one that prints and exits)."""
    program = posixpath.basename(words[0])
    try:
        cmdline.parse(shlex.join(words))
    except BadInput:
        found.ignored.append(program)
        return
    if asks := INFORMATIONAL.intersection(words):  # `llama-server --version`: a page's check, no launch
        found.ignored.append(f"{program} {sorted(asks)[0]}")
        return
    found.launches.append(Launch(words, at, env, container, name_hint=container.last("--name") if container else None))


def _container_command(container: Container, at: str) -> list[str] | None:
    """What a `docker run` runs: its --entrypoint and command, the image's entrypoint before arguments alone."""
    entrypoint = container.last("--entrypoint")
    command = list(container.command)
    if entrypoint is not None:
        return [*shlex.split(entrypoint), *command] if entrypoint else command
    idle = command and posixpath.basename(command[0]) in IDLE and (len(command) == 1 or command[1] != "-c")
    if idle and (posixpath.basename(command[0]) in ("sleep", "tail") or len(command) == 1):
        return None  # sleep infinity, tail -f /dev/null, a bare shell: kept for a later docker exec
    repository = imageref.repository(container.image) or container.image
    known = ENTRYPOINTS.get(repository)
    if known is not None and (not command or command[0].startswith("-") or not _is_engine(command)):
        return [*known, *command]
    if command and command[0] == "serve" and not _is_engine(command) and _is_engine(["vllm", *command]):
        # `serve --model ...` on an image whose entrypoint sparkplay does not know: vLLM's own subcommand and
        # flags (a community vLLM image, one built locally), read as `vllm serve` and said so
        container.options.setdefault("_entrypoint_note", []).append("vllm")
        return ["vllm", *command]
    if command and not command[0].startswith("-"):
        return command
    if engine := registry.by_flags(command):  # what its flags say, for an image whose entrypoint is not known
        program = list(registry.spec(engine).program)
        container.options.setdefault("_entrypoint_note", []).append(" ".join(program))
        return [*program, *command]
    return command or None


def _is_engine(words: list[str]) -> bool:
    try:
        cmdline.parse(shlex.join(words))
    except BadInput:
        return False
    return True


def _eugr(words: list[str], at: str, env: dict[str, str], found: Found, depth: int) -> None:
    """eugr's launch-cluster.sh [options] [exec] COMMAND: the engine runs in its image (-t) on every node (-n)."""
    options: dict[str, list[str]] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        if words[i] in EUGR_VALUED and i + 1 < len(words):
            options.setdefault(words[i], []).append(words[i + 1])
            i += 2
        else:
            options.setdefault(words[i], []).append("true")
            i += 1
    if script := options.get("--launch-script"):
        found.elsewhere.append(
            f"{at} runs the launch script {shell.shown(script[-1])} (a file of eugr's profiles/): import that file"
        )
        return
    rest = words[i:]
    if rest[:1] in (["exec"], ["start"]):
        rest = rest[1:]
    if not rest:
        found.ignored.append("launch-cluster.sh (starts its containers, runs no engine)")
        return
    image = (options.get("-t") or ["vllm-node"])[-1]
    container = Container(image, [], {"--env": options.get("-e", []) + options.get("--env", [])})
    before = len(found.launches)
    _inside(rest, at, container, found, depth)
    nodes = options.get("-n") or options.get("--nodes")
    for launch in found.launches[before:]:
        if nodes:
            launch.nodes = len([n for n in nodes[-1].split(",") if n.strip()])
            launch.notes.append(("topology.nodes", "derived", f"launch-cluster.sh -n {nodes[-1]}: one rank a node"))
        launch.notes += [launch_script.mod_not_in_text(shell.shown(mod)) for mod in options.get("--apply-mod", [])]
        launch.notes.append(launch_script.built_by_eugr(image, "launch-cluster.sh"))
