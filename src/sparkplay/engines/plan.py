"""The launch plan: what runs on each rank, built from a recipe and the inventory's facts.

A plan is plain data (JSON-safe dicts) so Ansible can template units from it
and tests can compare it. Shape (docs/serving.md has the full list):

    {recipe, engine, runtime, image, packages, served_name, unit, api, health,
     leader_follows_workers, directories, ranks: [{rank, host, role, argv, env,
     exec, mounts, files, listen, wait_for}, ...]}

`exec` is the complete argv systemd starts (the docker client with its
options for the docker runtime, the engine binary for the native one);
`argv` is the engine's own command line inside it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline

UNIT = "sparkplay-serve"
CONTAINER = "sparkplay-serve"
DOCKER = "/usr/bin/docker"
ENV_FILE = "/etc/sparkplay/serve.env"
SMOKE_PROMPT = "What is 17*23?"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Node:
    """One rank as the inventory and its facts describe it."""

    host: str
    rank: int
    address: str  # its first IPv4 on the cable (the domain-0 twin)
    ifname: str  # the cable netdev NCCL/GLOO bootstrap over
    machine: str = "x86_64"  # uname -m: selects Debian's multiarch triplet
    fabric_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_facts(cls, host: str, facts: Mapping[str, Any]) -> Node:
        env = {str(k): str(v) for k, v in (facts.get("fabric_env") or {}).items()}
        addresses = [a for a in env.get("SPARKPLAY_FABRIC_ADDRESSES", "").split(",") if a]
        twins = [t for t in env.get("SPARKPLAY_FABRIC_TWINS", "").split(",") if t]
        if not addresses:
            raise BadInput(
                f"{host} has no cable address in its fabric environment",
                "run provision.yml first (it writes /etc/sparkplay/fabric.env)",
            )
        return cls(
            host=host,
            rank=int(facts["rank"]),
            address=addresses[0],
            ifname=env.get("NCCL_SOCKET_IFNAME") or (twins[0] if twins else ""),
            machine=str(facts.get("machine") or "x86_64"),
            fabric_env=env,
        )


@dataclass(frozen=True)
class Options:
    """What the inventory decides rather than the recipe."""

    model_root: str
    bind: str | None = None  # None: the recipe's (loopback unless it says otherwise)
    port: int | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)  # override the recipe's knobs
    state_dir: str = "/var/lib/sparkplay"
    health_timeout_s: int | None = None


@dataclass(frozen=True)
class Context:
    """Everything an adapter reads: the recipe, the ranks in order, the options."""

    recipe: Mapping[str, Any]
    nodes: tuple[Node, ...]
    options: Options

    @property
    def leader(self) -> Node:
        return self.nodes[0]

    @property
    def bind(self) -> str:
        return self.options.bind or self.recipe["serve"]["bind"]

    @property
    def port(self) -> int:
        return int(self.options.port or self.recipe["serve"]["port"])

    @property
    def knobs(self) -> dict[str, Any]:
        return {**(self.recipe.get("knobs") or {}), **self.options.knobs}

    @property
    def model_root(self) -> str:
        return self.options.model_root.rstrip("/") or "/"

    def checkpoint_dir(self, role: str) -> str | None:
        """Where the checkpoint role put the recipe's `role` checkpoint (same path on every rank)."""
        for ckpt in self.recipe["model"].get("checkpoints") or []:
            if ckpt["role"] == role:
                return f"{self.model_root}/{ckpt['repo'].replace('/', '--')}"
        return None

    def in_model_root(self, path: str, key: str) -> str:
        """A recipe path resolved under the model root; nothing outside it (recipes are untrusted)."""
        joined = posixpath.normpath(posixpath.join(self.model_root, path))
        if ".." in path.split("/") or not joined.startswith(self.model_root + "/"):
            raise BadInput(f"{key} {path!r} points outside the model root", "give a path inside the model root")
        return joined


def engine_args(args: Sequence[str], replaced: Sequence[str], owned: Sequence[str], engine: str) -> list[str]:
    """The recipe's flags verbatim, minus the ones sparkplay sets again itself.

    `replaced` flags hold what the recipe already states elsewhere (model
    path, port, bind), so sparkplay drops them and adds the effective value
    once; `owned` flags only sparkplay can know (ranks, peers), so a recipe
    that sets one is refused.
    """
    for flag in owned:
        if cmdline.has_flag(args, flag):
            raise BadInput(
                f"the recipe's engine flags set {flag}, which sparkplay sets per rank for {engine}",
                f"remove {flag} from serve.args (use the inventory's serve_* settings instead)",
            )
    return cmdline.without_flags(args, *replaced)


def environment(*layers: Mapping[str, Any]) -> dict[str, str]:
    """Later layers win; names and values checked so an env file cannot be bent by a value."""
    env: dict[str, str] = {}
    for layer in layers:
        for key, value in layer.items():
            text = str(value)
            if not _ENV_NAME.match(key):
                raise BadInput(f"environment name {key!r} is not valid", "use letters, digits and '_'")
            if "\n" in text or "\r" in text or "\0" in text:
                raise BadInput(f"environment value of {key} spans lines", "give it on one line")
            env[key] = text
    return env


def docker_exec(rank_plan: Mapping[str, Any], image: str) -> list[str]:
    """The foreground `docker run` systemd supervises: named, removed on exit, env from the 0600 file."""
    argv = [DOCKER, "run", "--rm", "--name", CONTAINER, "--env-file", ENV_FILE, *rank_plan["container_options"]]
    for mount in rank_plan["mounts"]:
        if any("," in mount[k] or "=" in mount[k] for k in ("source", "target")):
            raise BadInput(f"mount path {mount['source']!r} has ',' or '='", "use paths without them (docker --mount)")
        spec = f"type=bind,source={mount['source']},target={mount['target']}"
        argv += ["--mount", spec + (",readonly" if mount.get("readonly") else "")]
    return [*argv, image, *rank_plan["argv"]]


Adapter = Callable[[Context], dict[str, Any]]


def _adapters() -> dict[str, Adapter]:
    from sparkplay.engines import atlas, llamacpp, vllm  # late: they import this module

    return {"atlas": atlas.plan, "vllm": vllm.plan, "llamacpp": llamacpp.plan}


def check_nodes(nodes: Sequence[Node], wanted: int | None) -> tuple[Node, ...]:
    ordered = tuple(sorted(nodes, key=lambda n: n.rank))
    ranks = [n.rank for n in ordered]
    if ranks != list(range(len(ranks))):
        raise BadInput(f"ranks {ranks} are not 0..{len(ranks) - 1}", "give each node a distinct sparkplay_rank from 0")
    if wanted is not None and wanted != len(ordered):
        raise BadInput(
            f"the recipe runs on {wanted} node(s) but the inventory has {len(ordered)}",
            "list that many hosts in sparkplay_nodes or choose a recipe for your node count",
        )
    return ordered


def build(recipe: Mapping[str, Any], nodes: Sequence[Node], options: Options) -> dict[str, Any]:
    """The launch plan for every rank; raises BadInput naming what to fix."""
    ctx = Context(recipe, check_nodes(nodes, recipe["topology"]["nodes"]), options)
    engine = recipe["engine"]["name"]
    deployment = _adapters()[engine](ctx)
    runtime = recipe["engine"]["runtime"]
    for rank_plan in deployment["ranks"]:
        rank_plan["address"] = ctx.nodes[rank_plan["rank"]].address
        rank_plan["env"] = environment(rank_plan["env"])
        if runtime == "docker":
            rank_plan["exec"] = docker_exec(rank_plan, recipe["engine"]["image"])
        else:
            rank_plan["exec"] = list(rank_plan["argv"])
    url = f"http://{_client_address(ctx.bind)}:{ctx.port}"
    return {
        "recipe": recipe["name"],
        "title": recipe["title"],
        "engine": engine,
        "runtime": runtime,
        "image": recipe["engine"]["image"] if runtime == "docker" else None,
        "image_dir": recipe["engine"].get("image_dir") if runtime == "docker" else None,
        "packages": list(recipe["engine"].get("packages") or []) if runtime == "native" else [],
        "served_name": recipe["model"]["served_name"] or recipe["name"],
        "unit": f"{UNIT}.service",
        "env_file": ENV_FILE,
        "api": {"bind": ctx.bind, "port": ctx.port, "url": url},
        "health": {
            "timeout_s": int(options.health_timeout_s or recipe["serve"].get("health_timeout_s") or 900),
            "prompt": SMOKE_PROMPT,
        },
        "leader_follows_workers": bool(deployment.get("leader_follows_workers")),
        "directories": deployment.get("directories", []),
        "requires": deployment.get("requires", []),
        "ranks": deployment["ranks"],
    }


def _client_address(bind: str) -> str:
    """Where a client on the leader reaches an API bound to `bind`."""
    if bind in ("0.0.0.0", "", "*"):  # noqa: S104 - we only connect, to loopback
        return "127.0.0.1"
    if bind == "::":
        return "[::1]"
    return f"[{bind}]" if ":" in bind else bind
