"""`docker run` and `docker exec` read with docker's own option table (docker's CLI reference for `run` and
`exec`): which options take a value, which are switches, so the image and the command after it are found
exactly where docker finds them. Never run."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkplay.engines import registry
from sparkplay.errors import BadInput

# docker run's options that take a value (long names; the short ones map to them)
RUN_VALUED = frozenset(
    {
        "--add-host",
        "--annotation",
        "--attach",
        "--blkio-weight",
        "--blkio-weight-device",
        "--cap-add",
        "--cap-drop",
        "--cgroup-parent",
        "--cgroupns",
        "--cidfile",
        "--cpu-count",
        "--cpu-percent",
        "--cpu-period",
        "--cpu-quota",
        "--cpu-rt-period",
        "--cpu-rt-runtime",
        "--cpu-shares",
        "--cpus",
        "--cpuset-cpus",
        "--cpuset-mems",
        "--device",
        "--device-cgroup-rule",
        "--device-read-bps",
        "--device-read-iops",
        "--device-write-bps",
        "--device-write-iops",
        "--detach-keys",
        "--dns",
        "--dns-opt",
        "--dns-option",
        "--dns-search",
        "--domainname",
        "--entrypoint",
        "--env",
        "--env-file",
        "--expose",
        "--gpus",
        "--group-add",
        "--health-cmd",
        "--health-interval",
        "--health-retries",
        "--health-start-interval",
        "--health-start-period",
        "--health-timeout",
        "--hostname",
        "--io-maxbandwidth",
        "--io-maxiops",
        "--ip",
        "--ip6",
        "--ipc",
        "--isolation",
        "--kernel-memory",
        "--label",
        "--label-file",
        "--link",
        "--link-local-ip",
        "--log-driver",
        "--log-opt",
        "--mac-address",
        "--memory",
        "--memory-reservation",
        "--memory-swap",
        "--memory-swappiness",
        "--mount",
        "--name",
        "--network",
        "--net",
        "--network-alias",
        "--net-alias",
        "--oom-score-adj",
        "--pid",
        "--pids-limit",
        "--platform",
        "--publish",
        "--pull",
        "--restart",
        "--runtime",
        "--security-opt",
        "--shm-size",
        "--stop-signal",
        "--stop-timeout",
        "--storage-opt",
        "--sysctl",
        "--tmpfs",
        "--ulimit",
        "--user",
        "--userns",
        "--uts",
        "--volume",
        "--volume-driver",
        "--volumes-from",
        "--workdir",
    }
)
RUN_SWITCHES = frozenset(
    {
        "--detach",
        "--disable-content-trust",
        "--help",
        "--init",
        "--interactive",
        "--no-healthcheck",
        "--oom-kill-disable",
        "--privileged",
        "--publish-all",
        "--quiet",
        "--read-only",
        "--rm",
        "--sig-proxy",
        "--tty",
        "--use-api-socket",
    }
)
RUN_SHORT = {
    "-a": "--attach",
    "-c": "--cpu-shares",
    "-e": "--env",
    "-h": "--hostname",
    "-l": "--label",
    "-m": "--memory",
    "-p": "--publish",
    "-u": "--user",
    "-v": "--volume",
    "-w": "--workdir",
    "-d": "--detach",
    "-i": "--interactive",
    "-t": "--tty",
    "-P": "--publish-all",
    "-q": "--quiet",
}
EXEC_VALUED = frozenset({"--detach-keys", "--env", "--env-file", "--user", "--workdir"})
EXEC_SWITCHES = frozenset({"--detach", "--interactive", "--privileged", "--tty"})
EXEC_SHORT = {"-e": "--env", "-u": "--user", "-w": "--workdir", "-d": "--detach", "-i": "--interactive", "-t": "--tty"}
# what only the container's life is about: sparkplay's unit starts, restarts and removes it
LIFECYCLE = frozenset(
    {
        "--detach",
        "--interactive",
        "--tty",
        "--rm",
        "--restart",
        "--name",
        "--init",
        "--sig-proxy",
        "--detach-keys",
        "--quiet",
        "--pull",
        "--hostname",
        "--label",
        "--log-driver",
        "--log-opt",
        "--health-cmd",
        "--health-interval",
        "--health-retries",
        "--health-start-period",
        "--health-timeout",
        "--health-start-interval",
        "--no-healthcheck",
        "--stop-signal",
        "--stop-timeout",
        "--cidfile",
        "--workdir",
        "--platform",
    }
)


@dataclass
class Container:
    """What a `docker run` asks: its image, the command after it, and each option as given (name -> values)."""

    image: str
    command: list[str]
    options: dict[str, list[str]] = field(default_factory=dict)

    def values(self, name: str) -> list[str]:
        return self.options.get(name, [])

    def last(self, name: str) -> str | None:
        return self.options[name][-1] if self.options.get(name) else None

    def environment(self) -> dict[str, str]:
        """What a process in the container starts with: its -e NAME=VALUE settings (NAME alone passes the
        caller's, which the text does not say)."""
        return dict(v.split("=", 1) for v in self.values("--env") if "=" in v)


def _options(
    words: list[str], valued: frozenset[str], switches: frozenset[str], short: dict[str, str], what: str
) -> tuple[dict[str, list[str]], int]:
    """Options up to the first word that is none (the image, or the container), and its index."""
    options: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            return options, i + 1
        if not word.startswith("-") or word == "-":
            return options, i
        name, eq, value = word.partition("=")
        if name.startswith("--"):
            if name in valued:
                if not eq:
                    if i + 1 >= len(words):
                        raise BadInput(f"{what}: {name} has no value", f"give {name} its value")
                    value, i = words[i + 1], i + 1
                options.setdefault(name, []).append(value)
            elif name in switches:
                options.setdefault(name, []).append(value or "true")
            else:
                raise BadInput(
                    f"{what}: {name} is not an option docker knows", "check the command against `docker run --help`"
                )
            i += 1
            continue
        # short options: a cluster of switches (-it, -dit), the last of which may take a value (-itv x, -p8000:8000)
        j = 1
        while j < len(word):
            flag = "-" + word[j]
            long = short.get(flag)
            if long is None:
                raise BadInput(
                    f"{what}: {flag} is not an option docker knows", "check the command against `docker run --help`"
                )
            if long in valued:
                value = word[j + 1 :].removeprefix("=")
                if not value:
                    if i + 1 >= len(words):
                        raise BadInput(f"{what}: {flag} has no value", f"give {flag} its value")
                    value, i = words[i + 1], i + 1
                options.setdefault(long, []).append(value)
                break
            options.setdefault(long, []).append("true")
            j += 1
        i += 1
    return options, i


def parse_run(words: list[str], where: str = "") -> Container:
    """`docker run` words after `run`: the options, the image and the command after it."""
    options, at = _options(words, RUN_VALUED, RUN_SWITCHES, RUN_SHORT, "docker run")
    if at >= len(words):  # as bash reads it: often a `# comment \` that ended the line, its backslash with it
        raise BadInput(
            f"docker run{f' at {where}' if where else ''} names no image: the command ends after its options",
            "give the image after docker run's options (a comment at a line's end ends the command there: bash "
            "reads the backslash after it as part of the comment)",
        )
    return Container(words[at], words[at + 1 :], options)


def parse_exec(words: list[str]) -> tuple[str, list[str], dict[str, list[str]]]:
    """`docker exec` words after `exec`: (the container, the command, the options)."""
    options, at = _options(words, EXEC_VALUED, EXEC_SWITCHES, EXEC_SHORT, "docker exec")
    if at + 1 >= len(words):
        raise BadInput("docker exec names no container and command", "give the container and the engine's command")
    return words[at], words[at + 1 :], options


ELSEWHERE = "_started_elsewhere"  # an option a container carries when the text never starts it (docker exec)


def exec_target(name: str, started: Container | None, images: list[str], nodes: list[str]) -> tuple[Container, str]:
    """The container a `docker exec NAME` runs in, and what the import says of its image: the one the text starts
    under that name; else the Ray node vLLM's run_cluster.sh started last (the container a two-node guide execs
    into, found by `docker ps`); else the one image the text starts; else unknown."""
    if started is not None:
        return started, ""
    if nodes:
        said = f"docker exec runs it in {name}, the Ray node run_cluster.sh starts from {nodes[-1]}: that image"
        return Container(nodes[-1], [], {}), f"{said} is the engine's"
    if len(set(images)) == 1:
        said = f"docker exec runs it in {name}, which the text starts from {images[0]}: that image is the engine's"
        return Container(images[0], [], {}), said
    said = (
        f"docker exec runs it in the container {name}, which the text does not start: its image is not in the text, "
        "so the engine's default image is used (--set engine.image=IMAGE names that container's own)"
    )
    return Container("", [], {ELSEWHERE: []}), said


def env_outside(whose: str, names: list[str]) -> tuple[str, str, str]:
    """The note for a process environment (a unit's, a llama-swap model's) given to `docker run` itself: it is
    the docker command's, and reaches the container only through -e."""
    return (
        "serve.env",
        "ignored",
        f"{whose} ({', '.join(names)}) is the docker command's own environment, not the container's (docker "
        "passes only what -e names): not applied",
    )


# an image whose tag a page leaves for its reader (`nvcr.io/nvidia/vllm:<latest_container_version>`)
PLACEHOLDER = r"<[A-Za-z][A-Za-z0-9_ .:/-]*>"  # a value a text leaves for its reader (`<MODEL>`)
PLACEHOLDER_TAG = re.compile(rf"^(?P<repository>[^<>\s:]+(?::\d+)?(?:/[^<>\s:]+)*):{PLACEHOLDER}$")


def placeholder_tag(container: Container | None) -> tuple[str, str, str] | None:
    """A placeholder tag of an engine's own default image repository is that default's pinned tag (the page's
    "the latest version" is one the engine's default pins), and the note that says so; else the image stays,
    and its placeholder is refused as any other."""
    found = PLACEHOLDER_TAG.match(container.image) if container is not None else None
    if container is None or found is None:
        return None
    for spec in registry.specs().values():
        default = spec.defaults.image or ""
        if default.rsplit(":", 1)[0] == found.group("repository"):
            said = f"{container.image} leaves its tag to the reader: {spec.title}'s pinned default, {default}, is used"
            container.image = default
            return "engine.image", "derived", said
    return None
