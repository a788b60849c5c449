"""Small rules over node facts, used by the roles through filters."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any


def mount_for(path: str, mounts: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ansible_mounts entry of the filesystem that holds (or would hold) `path`."""
    best: Mapping[str, Any] | None = None
    for mount in mounts:
        point = str(mount.get("mount", ""))
        inside = path == point or path.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and (best is None or len(point) > len(str(best["mount"]))):
            best = mount
    return best


def free_bytes_for(path: str, mounts: Iterable[Mapping[str, Any]]) -> int | None:
    """Bytes free on the filesystem that holds (or would hold) `path`, from ansible_mounts."""
    best = mount_for(path, mounts)
    return None if best is None else int(best.get("size_available", 0))


def path_and_parents(path: str) -> list[str]:
    """'/a/b/c' -> ['/a/b/c', '/a/b', '/a', '/']: where to look for the nearest folder that exists."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts), 0, -1)] + ["/"]


# memory-backed or copy-on-write: a disk cache there is no cache at all
PREFIX_CACHE_REFUSED_FS = ("tmpfs", "ramfs", "overlay", "overlayfs")


def prefix_cache_problems(path: str, size_gb: int, mounts: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why `path` cannot hold a `size_gb` GiB disk prefix cache on this host (empty: it can)."""
    mount = mount_for(path, list(mounts))
    if mount is None:
        return [f"no filesystem holds {path}"]
    problems = []
    if str(mount.get("fstype")) in PREFIX_CACHE_REFUSED_FS:
        problems.append(f"{path} is on {mount['fstype']} ({mount['mount']}): choose a folder on a disk")
    free = int(mount.get("size_available", 0))
    if free < size_gb * 2**30:
        problems.append(f"{path} has {free / 2**30:.1f} GiB free, the cache needs {size_gb} GiB: free space or shrink")
    return problems


def docker_daemon_merge(current: Mapping[str, Any] | None, runtime: str, runtime_path: str) -> dict[str, Any]:
    """daemon.json with the NVIDIA runtime registered, every key of the user's kept as it was."""
    merged: dict[str, Any] = copy.deepcopy(dict(current or {}))
    runtimes = merged.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise ValueError("daemon.json 'runtimes' is not an object; fix it by hand first")
    runtimes.setdefault(runtime, {"path": runtime_path, "args": []})
    return merged


SS_PID = re.compile(r"pid=(\d+)")


def listener_pids(ss_output: str) -> list[int]:
    """PIDs in `ss -Htlnp` output (users:(("name",pid=123,fd=4)))."""
    return sorted({int(pid) for pid in SS_PID.findall(ss_output)})


def nvidia_arch(machine: str) -> str:
    """NVIDIA's repository architecture: aarch64 servers (a Spark) are 'sbsa'."""
    return {"aarch64": "sbsa", "arm64": "sbsa", "x86_64": "x86_64", "amd64": "x86_64"}.get(machine, machine)
