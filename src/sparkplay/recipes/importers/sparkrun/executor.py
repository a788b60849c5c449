"""sparkrun's executor_config (the engine container's docker settings) against sparkplay's own container. Each
setting is one of: what every sparkplay GPU engine container already has (engines/context.py and the Atlas
adapters: the host's network and IPC, all GPUs, the RDMA devices, IPC_LOCK, unlimited memlock), so nothing to do;
mapped into the recipe (other resource limits, the container's user), confined by the schema's patterns; or left,
and the import names it with the reason (a privileged container, other capabilities, devices or mounts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkplay.boundary import CONTAINER_ULIMIT, CONTAINER_USER
from sparkplay.engines import registry


def in_container(engine: str) -> bool:
    """Whether sparkplay runs the engine in a container (llama.cpp runs from the node's packages: none to set)."""
    return registry.spec(engine).defaults.runtime == "docker"


# key -> the values sparkplay's container already has
SAME = {"gpus": ("all",), "ipc": ("host",), "network": ("host",)}
DEVICES_HAD = ("/dev/infiniband", "/dev/infiniband:/dev/infiniband")
CAPS_HAD = ("IPC_LOCK", "CAP_IPC_LOCK")
MEMLOCK_HAD = ("memlock=-1", "memlock=-1:-1")
ULIMIT, USER = CONTAINER_ULIMIT, CONTAINER_USER  # the boundary's rules: what a recipe may set on its container
# read elsewhere (shm_size: serve.shm_size) or about the hosts, not the container (sparkplay has its inventory)
READ_ELSEWHERE = ("shm_size", "ssh")


@dataclass
class Executor:
    ulimits: list[str] = field(default_factory=list)
    user: str | None = None
    left: dict[str, Any] = field(default_factory=dict)


def read(executor: dict[str, Any], engine: str) -> Executor:
    """The settings sparkplay maps, and those it leaves (each named by the import)."""
    out = Executor()
    settings = {k: v for k, v in executor.items() if k not in READ_ELSEWHERE}
    if not in_container(engine):
        out.left = settings
        return out
    for key, value in settings.items():
        if key == "auto_remove":  # sparkplay's unit owns the container's life: started by it, removed after it
            continue
        if key == "entrypoint" and not value:  # the engine is the entrypoint and the command its arguments
            continue
        if key in SAME and str(value) in SAME[key]:
            continue
        if key == "user" and USER.match(str(value)):
            out.user = str(value)
            continue
        if key in ("devices", "cap_add", "ulimit") and isinstance(value, list):
            rest = _list_setting(key, [str(v).replace(" ", "") for v in value], out)
            if rest:
                out.left[key] = rest
            continue
        out.left[key] = value
    return out


def _list_setting(key: str, values: list[str], out: Executor) -> list[str]:
    """A list setting less what sparkplay has or maps (limits into out.ulimits); what is left."""
    if key == "devices":
        return [v for v in values if v not in DEVICES_HAD]
    if key == "cap_add":
        return [v for v in values if v.upper() not in CAPS_HAD]
    rest = []
    for limit in values:
        if limit in MEMLOCK_HAD:
            continue
        if ULIMIT.match(limit):
            out.ulimits.append(limit)
        else:
            rest.append(limit)
    return rest
