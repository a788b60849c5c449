"""Small rules over node facts, used by the roles through filters."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml


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


SS_CGROUP = re.compile(r"\bcgroup:(\S+)")


def listener_cgroups(ss_output: str) -> list[str] | None:
    """Each listening socket's cgroup in `ss -Htln --cgroup` output (the kernel's socket diagnostics: no
    reading of other users' /proc fds, which root lacks without CAP_SYS_PTRACE); None where the kernel
    gives none that says anything (cgroup v1: `/`)."""
    found = [m.group(1) for line in ss_output.splitlines() if (m := SS_CGROUP.search(line))]
    lines = [line for line in ss_output.splitlines() if line.strip()]
    if not lines or len(found) != len(lines) or all(c == "/" for c in found):
        return None
    return found


def nvidia_arch(machine: str) -> str:
    """NVIDIA's repository architecture: aarch64 servers (a Spark) are 'sbsa'."""
    return {"aarch64": "sbsa", "arm64": "sbsa", "x86_64": "x86_64", "amd64": "x86_64"}.get(machine, machine)


# -- known Spark pitfalls, caught before they bite --------------------------------------------


def cma_problem(meminfo: str, rdma_expected: bool) -> str | None:
    """A kernel with no CMA area (CmaTotal: 0) makes RDMA memory registration fail with ENOMEM."""
    if not rdma_expected:
        return None
    match = re.search(r"^CmaTotal:\s+(\d+)\s+kB", meminfo, re.MULTILINE)
    if match and int(match.group(1)) == 0:
        return (
            "CmaTotal is 0 kB: RDMA memory registration will fail with ENOMEM; boot with a CMA area "
            "(kernel command line cma=1G, e.g. in GRUB_CMDLINE_LINUX) and reboot"
        )
    return None


def pcie_warnings(pcie: dict[str, dict[str, Any]]) -> list[str]:
    """A ConnectX twin linked below its PCIe width (an old BIOS wires the second half at x4)."""
    return [
        f"{name} is linked at PCIe x{info['width']} of x{info['max_width']}: the cable runs at a fraction of its "
        "speed; update the system BIOS/firmware (a known Spark issue) and check the board's slot"
        for name, info in sorted(pcie.items())
        if info.get("width") and info.get("max_width") and info["width"] < info["max_width"]
    ]


NCCL_RELEASE = re.compile(r"^v?\d+\.\d+\.\d+-\d+(\+cuda\d+(\.\d+)*)?\Z")


def nccl_build_problem(version: str | None, where: str) -> str | None:
    """An NCCL that is not a release tag (a development build: a git hash, `a0`, `dev`, `rc`): one such
    plateaued near 3 GB/s all_gather on a Spark pair against about 24 GB/s for v2.28.9-1."""
    text = (version or "").strip()
    if not text or NCCL_RELEASE.match(text):
        return None
    return (
        f"{where} has NCCL {text}, not a release tag (like 2.28.9-1): development builds have run several "
        "times slower across the cable; use an image or package built on an NCCL release"
    )


def netplan_conflicts(listing: str, own_file: str, twins: list[str], mtu: int, addresses: dict[str, str]) -> list[str]:
    """Other netplan files that configure the cable's twins with another MTU or addresses (or DHCP).

    `listing` is `grep -H '' /etc/netplan/*.yaml`: each line prefixed with its file's path. Netplan merges
    every file, so a cloud-init or hand-written one silently fights sparkplay's: name it, the setting, the fix.
    """
    files: dict[str, list[str]] = {}
    for line in listing.splitlines():
        path, sep, text = line.partition(":")
        if sep and path.endswith((".yaml", ".yml")):
            files.setdefault(path, []).append(text)
    problems = []
    for path, lines in sorted(files.items()):
        if path == own_file:
            continue
        try:
            doc = yaml.safe_load("\n".join(lines)) or {}
        except yaml.YAMLError:
            problems.append(f"{path} is not valid YAML: netplan will refuse every file; fix or remove it")
            continue
        ethernets = ((doc.get("network") or {}).get("ethernets") or {}) if isinstance(doc, dict) else {}
        for twin in twins:
            config = ethernets.get(twin) if isinstance(ethernets, dict) else None
            if not isinstance(config, dict):
                continue
            fix = f"remove {twin} from {path} (sparkplay's {own_file} configures it)"
            if config.get("mtu") is not None and int(config["mtu"]) != mtu:
                problems.append(f"{path} sets {twin} mtu {config['mtu']} (the cable needs {mtu}): {fix}")
            theirs = [str(a) for a in config.get("addresses") or []]
            if theirs and addresses.get(twin) not in theirs:
                problems.append(
                    f"{path} gives {twin} the addresses {', '.join(theirs)} (sparkplay gives "
                    f"{addresses.get(twin)}): {fix}"
                )
            if config.get("dhcp4") in (True, "true", "yes") or config.get("dhcp6") in (True, "true", "yes"):
                problems.append(f"{path} turns on DHCP for {twin} (the cable has no DHCP server): {fix}")
    return problems
