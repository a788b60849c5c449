"""What every engine adapter reads and shares: the ranks, the inventory's options, the context.

Adapters (atlas, vllm, llamacpp) import this module only; `plan` imports
the adapters. So the import graph has no circle.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkplay import argv, boundary, checkpoints, topology
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# the host folder for engine caches and sparkplay's state (serve_state_dir moves it)
STATE_DIR = "/var/lib/sparkplay"
# keys from the host's fabric.env that the engines read (NCCL_*, GLOO_*)
FABRIC_PREFIXES = ("NCCL_", "GLOO_")


def fabric_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(FABRIC_PREFIXES)}


@dataclass(frozen=True)
class Node:
    """One rank as the inventory and its facts describe it."""

    host: str
    rank: int
    address: str  # its first IPv4 on the cable (the domain-0 twin)
    ifname: str  # the cable netdev GLOO (and NCCL, unless the fabric names more) bootstraps over
    machine: str = "x86_64"  # uname -m: selects Debian's multiarch triplet
    fabric_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def leads(self) -> bool:
        return topology.leads(self.rank)

    @property
    def nccl_ifnames(self) -> str:
        """NCCL's socket interfaces: in a ring both twins (each reaches another neighbour), else `ifname`."""
        return self.fabric_env.get("NCCL_SOCKET_IFNAME") or self.ifname

    @classmethod
    def from_facts(cls, host: str, facts: Mapping[str, Any]) -> Node:
        env = {str(k): str(v) for k, v in (facts.get("fabric_env") or {}).items()}
        addresses = [a for a in env.get("SPARKPLAY_FABRIC_ADDRESSES", "").split(",") if a]
        twins = [t for t in env.get("SPARKPLAY_FABRIC_TWINS", "").split(",") if t]
        if not addresses:
            raise BadInput(
                f"{host} has no cable address in its fabric environment",
                "run provision.yml first (it writes the fabric environment)",
            )
        return cls(
            host=host,
            rank=int(facts["rank"]),
            address=addresses[0],
            ifname=env.get("GLOO_SOCKET_IFNAME") or env.get("NCCL_SOCKET_IFNAME") or (twins[0] if twins else ""),
            machine=str(facts.get("machine") or "x86_64"),
            fabric_env=env,
        )


def api_address(serve: Mapping[str, Any], bind: Any = None, port: Any = None) -> tuple[str, int]:
    """Where the API listens: the inventory's serve_bind / serve_port where set, else the recipe's."""
    return str(bind or serve["bind"]), int(port or serve["port"])


@dataclass(frozen=True)
class Options:
    """What the inventory decides rather than the recipe."""

    model_root: str
    bind: str | None = None  # None: the recipe's (loopback unless it says otherwise)
    port: int | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)  # override the recipe's knobs
    state_dir: str = STATE_DIR
    health_timeout_s: int | None = None
    docker: str = "/usr/bin/docker"  # the client systemd runs for the docker runtime
    # the privileged requests the inventory allows (serve_allow); None: a rehearsal at import, which checks
    # everything else and shows the requests instead of refusing them
    allow: frozenset[str] | None = frozenset()
    # the image repositories the inventory trusts (serve_trusted_images): others are requests, pinned
    trusted_images: tuple[str, ...] = boundary.TRUSTED_IMAGES
    slot: str | None = None  # an added deployment's (engines/names.py); None: the primary
    # every launch setting by name (sparkplay.settings.SETTINGS["launch"], defaults filled in): a setting an
    # adapter reads for itself is one entry there and one role default, no plumbing between
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """Everything an adapter reads: the recipe, the ranks in order, the options."""

    recipe: Mapping[str, Any]
    nodes: tuple[Node, ...]
    options: Options

    @property
    def leader(self) -> Node:
        return next(node for node in self.nodes if node.leads)

    @property
    def bind(self) -> str:
        return api_address(self.recipe["serve"], self.options.bind, self.options.port)[0]

    @property
    def port(self) -> int:
        return api_address(self.recipe["serve"], self.options.bind, self.options.port)[1]

    def rendezvous(self, base: int, kind: int = 0) -> int:
        """A port the ranks meet on: the engine's own `base` for the primary; for an added deployment, the
        port after its API port (`kind` 0), then the next (1, 2), so two deployments spanning the same nodes
        never share one (admission refuses a port another deployment's rank holds on the node)."""
        if self.options.slot is None:
            return base
        return self.port + 1 + kind

    @property
    def knobs(self) -> dict[str, Any]:
        return {**(self.recipe.get("knobs") or {}), **self.options.knobs}

    @property
    def model_root(self) -> str:
        return checkpoints.absolute(self.options.model_root, "sparkplay_model_root")

    def checkpoint_dir(self, role: str) -> str | None:
        """Where the checkpoint role put the recipe's `role` checkpoint (same path on every rank)."""
        for ckpt in self.recipe["model"].get("checkpoints") or []:
            if ckpt["role"] == role:
                return checkpoints.checkpoint_dir(self.model_root, ckpt["repo"])
        return None

    def in_model_root(self, path: str, key: str) -> str:
        """A recipe path resolved under the model root; nothing outside it (recipes are untrusted)."""
        joined = posixpath.normpath(posixpath.join(self.model_root, path))
        if path.startswith("/") and not joined.startswith(self.model_root + "/"):
            # a file or folder on the machine the text was written on: sparkplay serves what it downloads
            base = posixpath.basename(path.rstrip("/"))
            inside = f"ORG--NAME/{base}" if posixpath.splitext(base)[1] else "ORG--NAME"  # a file, or the folder
            raise BadInput(
                f"{key} {path!r} is a path on the machine the recipe was written on, outside the model root",
                f"name the repository it comes from: --set model.repo=ORG/NAME --set {key}={inside} (its place in "
                "that checkpoint's mirror)",
            )
        if ".." in path.split("/") or not joined.startswith(self.model_root + "/"):
            raise BadInput(f"{key} {path!r} points outside the model root", "give a path inside the model root")
        return joined


def engine_args(recipe: Mapping[str, Any], replaced: Sequence[str], owned: Sequence[str], engine: str) -> list[str]:
    """The recipe's flags verbatim, minus the ones sparkplay sets again itself, with its context length.

    `replaced` flags hold what the recipe already states elsewhere (model
    path, port, bind), so sparkplay drops them and adds the effective value
    once; `owned` flags only sparkplay can know (ranks, peers), so a recipe
    that sets one is refused. The context length is the recipe's field: the
    engine's flag is written from it where the flags leave it out, and a
    recipe whose flag says otherwise is refused naming both.
    """
    mismatch = cmdline.context_mismatch(engine, recipe["serve"]["args"], recipe.get("context_length"))
    if mismatch:
        raise BadInput(mismatch, "make them the same in the recipe (or drop the flag)")
    args = cmdline.with_context(engine, recipe["serve"]["args"], recipe.get("context_length"))
    for flag in owned:
        if argv.has_flag(args, flag):
            raise BadInput(
                f"the recipe's engine flags set {flag}, which sparkplay sets per rank for {engine}",
                f"remove {flag} from serve.args (use the inventory's serve_* settings instead)",
            )
    return argv.without_flags(args, *replaced)


def parallel_size(args: Sequence[str], stated: int | None, *flags: str) -> int:
    """A parallel group's size as the engine's flag gives it, else the recipe's field (1 when unset); a value
    that is not a whole number of GPUs is refused naming the flag."""
    value = argv.flag_value(args, *flags)
    if value is None:
        return int(stated or 1)
    if not value.isdigit() or int(value) < 1:
        raise BadInput(f"{flags[0]} {value!r} is not a whole number", f"give {flags[0]} a number of GPUs")
    return int(value)


# every engine container: no capability but the ones its engine documents (each adapter adds those), so
# no raw sockets on the host's network (docker's default CAP_NET_RAW read other models' loopback traffic),
# no chown/setuid/mknod, and no way to gain privileges back
CONFINED = ("--cap-drop", "ALL", "--security-opt", "no-new-privileges=true")
# Atlas's containers (both images), as its own start scripts run them: the host's network and IPC namespace
# with 32 GB of /dev/shm; the GPU, the RDMA devices, confined, and the one capability memory registration needs
HOST_NETWORK_IPC = ("--network", "host", "--ipc", "host", "--shm-size", "32g")
GPU_RDMA_CONFINED = ("--gpus", "all", "--device", "/dev/infiniband", *CONFINED, "--cap-add", "IPC_LOCK")


def gpu_container_options(shm_size: str | None, one_node: bool = False) -> list[str]:
    """What a GPU engine's container on a Spark is given (vLLM's and SGLang's alike): the host's network (the
    API on the host's loopback for the gateway and the probe, NCCL over the cable), the GPU and the RDMA
    devices with the memory lock registration needs (IPC_LOCK, the one capability), no way to gain
    privileges. The host's IPC namespace only across nodes, as the Spark recipes run it; one node's ranks
    share memory inside the container (--shm-size)."""
    return [
        "--network",
        "host",
        *([] if one_node else ["--ipc", "host"]),
        "--gpus",
        "all",
        "--shm-size",
        shm_size or "32g",
        "--ulimit",
        "memlock=-1",
        "--device",
        "/dev/infiniband",
        *CONFINED,
        "--cap-add",
        "IPC_LOCK",
        "--stop-timeout",
        "60",
    ]


# the cache's name for the mirrored snapshot: sparkplay's own, never a recipe's revision text (the
# mirror already holds the pinned revision; a ref here is only a path inside the container)
SNAPSHOT = "sparkplay-mirror"


def hub_cache(ctx: Context, repo: str, home: str, ref_name: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Mounts that make `repo` a complete, offline Hugging Face cache entry under `home` (the container's
    HF_HOME), and the ref file they read (/etc/sparkplay/REF_NAME.ORG--NAME, beside the other files the serve
    role writes; reset removes it): an engine that names the model by its hub id reads the mirrored
    checkpoint, and nothing is downloaded in the container."""
    source = checkpoints.checkpoint_dir(ctx.model_root, repo)
    org, _, name = repo.partition("/")
    entry = f"{home}/hub/models--{org}--{name}"
    ref = f"/etc/sparkplay/{ref_name}.{org}--{name}"
    mounts = [
        {"source": source, "target": f"{entry}/snapshots/{SNAPSHOT}", "readonly": True},
        {"source": ref, "target": f"{entry}/refs/main", "readonly": True},
    ]
    return mounts, {"path": ref, "content": SNAPSHOT, "mode": "0644"}


def served_name(recipe: Mapping[str, Any]) -> str:
    """The name the API serves the model under: the recipe's, else the recipe's own name."""
    return str(recipe["model"]["served_name"] or recipe["name"])


def with_served_name(args: Sequence[str], recipe: Mapping[str, Any], *flags: str) -> list[str]:
    """The engine's flags naming the served model where the recipe's leave it out: sparkplay serves the
    checkpoint from its own path, which the engine would otherwise take for the model's name."""
    if argv.has_flag(args, *flags):
        return list(args)
    return [*args, flags[0], served_name(recipe)]


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
