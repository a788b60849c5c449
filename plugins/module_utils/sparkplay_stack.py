"""What a node's stack is made of, read on the node (stdlib only): the rows of sparkplay's lock.

Each reader returns None for what the node does not have (a lab node has no NVIDIA driver): a lock says
"none", it never guesses.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable

from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_managed import sha256_file
from ansible_collections.sparkplay.spark.plugins.module_utils.sparkplay_probe import dpkg_stanzas

Run = Callable[[list], tuple[int, str, str]]
# the packages whose version is the stack's where a node has them (the NVIDIA ones by pattern: the driver's
# package carries its branch in its name)
STACK_PACKAGES = re.compile(
    r"^(libnccl2|nvidia-container-toolkit|docker-ce|docker\.io|containerd(\.io)?|mlnx-ofed-kernel-utils|"
    r"rdma-core|ibverbs-providers|nvidia-driver-[0-9]+(-open|-server|-server-open)?|cuda-toolkit-[0-9-]+)$"
)
# the packages held against unattended upgrades where installed: the running kernel's and the driver's
HOLD_PACKAGES = re.compile(
    r"^(nvidia-driver-[0-9]+(-open|-server|-server-open)?|nvidia-dkms-[0-9]+.*|"
    r"linux-modules-nvidia-[0-9]+-.*)$"
)


# the native libraries that decide multi-node behaviour, read by their bytes: two builds of one version (pip's
# NCCL and DGX OS's) differ only there. Found by name in the library folders and in virtualenvs' nvidia wheels.
LIBRARY_NAME = re.compile(r"^(libnccl|libnccl-net[A-Za-z0-9_-]*|libibverbs|libmlx5|librdmacm)\.so(\.[0-9]+)*$")
LIBRARY_DIRS = (
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/cuda/lib64",
    "/usr/lib/*-linux-gnu",
    "/usr/lib/*-linux-gnu/libibverbs",
)
VENV_LIBRARY_DIRS = "lib/python3*/site-packages/nvidia/*/lib"
LIBRARY_MAX = 4 << 30  # bytes: larger is not a library (NCCL's is about 250 MB)


def dpkg_packages(status_file: str) -> dict:
    """Installed packages (`install ok installed`) as {name: {version, held}} from dpkg's status file."""
    found = {}
    for fields in dpkg_stanzas(status_file):
        status = fields.get("Status", "").split()
        if status[1:] == ["ok", "installed"] and fields.get("Package"):
            version = fields.get("Version", "").strip()
            found[fields["Package"].strip()] = {"version": version, "held": status[0] == "hold"}
    return found


def os_release(path: str = "/etc/os-release") -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            fields = dict(line.split("=", 1) for line in fh.read().splitlines() if "=" in line)
    except OSError:
        return None
    name = fields.get("PRETTY_NAME") or fields.get("NAME") or ""
    return name.strip().strip('"') or None


def nvidia_driver(path: str = "/proc/driver/nvidia/version") -> str | None:
    """The loaded kernel module's version (no driver loaded: None)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    found = re.search(r"Kernel Module(?: for [a-z0-9_]+)?\s+([0-9][0-9.]+)", text)
    return found.group(1) if found else text.splitlines()[0].strip() if text else None


def cuda(root: str = "/usr/local/cuda") -> str | None:
    """The toolkit's version from its version.json (CUDA 11.1 on), else version.txt."""
    try:
        with open(os.path.join(root, "version.json"), encoding="utf-8") as fh:
            return str(json.load(fh)["cuda"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(root, "version.txt"), encoding="utf-8") as fh:
            found = re.search(r"([0-9]+\.[0-9.]+)", fh.read())
            return found.group(1) if found else None
    except OSError:
        return None


def fabric_twins(env_file: str) -> list:
    """The cable twins a node's fabric environment names (SPARKPLAY_FABRIC_TWINS), none when it has none."""
    try:
        with open(env_file, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    for line in lines:
        key, _sep, value = line.partition("=")
        if key.strip() == "SPARKPLAY_FABRIC_TWINS":
            twins = [t.strip() for t in value.strip().strip('"').split(",")]
            return [t for t in twins if re.match(r"^[A-Za-z0-9_.:-]{1,15}$", t)]
    return []


def fabric(ifname: str, ethtool: str | None, run: Run) -> str | None:
    """A cable twin's driver, its version and the NIC's firmware (`ethtool -i`), else the driver from sysfs."""
    if not os.path.exists(f"/sys/class/net/{ifname}"):
        return None
    if ethtool:
        rc, out, _err = run([ethtool, "-i", ifname])
        if rc == 0:
            fields = {k.strip(): v.strip() for k, _sep, v in (line.partition(":") for line in out.splitlines())}
            parts = [fields.get("driver", ""), fields.get("version", "")]
            firmware = fields.get("firmware-version", "")
            if firmware and firmware.upper() != "N/A":
                parts.append(f"firmware {firmware}")
            return " ".join(p for p in parts if p) or None
    driver = os.path.realpath(f"/sys/class/net/{ifname}/device/driver")
    return os.path.basename(driver) if os.path.exists(driver) else "no driver readable"


def docker(docker_cli: str | None, images: list, run: Run) -> tuple:
    """The engine's server version and each image as its repo digest (else its local id), None when absent."""
    if not docker_cli or not os.access(docker_cli, os.X_OK):
        return None, {image: None for image in images}
    rc, out, _err = run([docker_cli, "version", "--format", "{{.Server.Version}}"])
    server = out.strip() if rc == 0 and out.strip() else None
    found = {}
    for image in images:
        rc, out, _err = run([docker_cli, "image", "inspect", "--format", "{{json .RepoDigests}} {{.Id}}", image])
        if rc != 0:
            found[image] = None
            continue
        digests_json, _sep, image_id = out.strip().rpartition(" ")
        try:
            digests = json.loads(digests_json) or []
        except ValueError:
            digests = []
        found[image] = next((d.split("@", 1)[1] for d in digests if "@" in d), image_id or None)
    return server, found


def files(paths: list) -> dict:
    """Each path as its sha256 ('sha256:...'), None when absent; a folder (a virtualenv) by the distributions
    it holds (their dist-info names, with versions): 'N distributions sha256:...'."""
    found = {}
    for path in paths:
        if os.path.isdir(path):
            dists = sorted(
                os.path.basename(d)
                for d, _dirs, names in os.walk(path)
                if d.endswith(".dist-info") and "RECORD" in names
            )
            digest = hashlib.sha256("\n".join(dists).encode()).hexdigest()
            found[path] = f"{len(dists)} distributions sha256:{digest}" if dists else None
        elif os.path.isfile(path):
            found[path] = "sha256:" + sha256_file(path)
        else:
            found[path] = None
    return found


def libraries(venvs: list, dirs: tuple = LIBRARY_DIRS) -> dict:
    """Each NCCL and RDMA library in the library folders (`dirs`, glob patterns) and in the nvidia wheels of
    the given virtualenvs, by its real path, as its sha256 ('sha256:...'); links are followed, each file read
    once."""
    folders = [d for pattern in dirs for d in glob.glob(pattern)]
    folders += [d for venv in venvs if os.path.isdir(venv) for d in glob.glob(os.path.join(venv, VENV_LIBRARY_DIRS))]
    found = {}
    for folder in sorted(set(folders)):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in sorted(names):
            if not LIBRARY_NAME.match(name):
                continue
            real = os.path.realpath(os.path.join(folder, name))
            if real in found:
                continue
            try:
                info = os.stat(real)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_size <= LIBRARY_MAX:
                found[real] = "sha256:" + sha256_file(real)
    return dict(sorted(found.items()))


def checkpoints(folders: list) -> dict:
    """Each checkpoint folder's completion marker as its revision and manifest digest, None when unmarked."""
    found = {}
    for folder in folders:
        try:
            with open(os.path.join(folder, ".sparkplay", "complete.json"), encoding="utf-8") as fh:
                marker = json.load(fh)
            found[folder] = {"revision": marker.get("revision"), "manifest": marker.get("manifest_digest")}
        except (OSError, ValueError, AttributeError):
            found[folder] = None
    return found


def held_by_sparkplay(path: str) -> list:
    """The packages sparkplay's holds file lists (none: no file, or not one sparkplay wrote as a list)."""
    try:
        with open(path, encoding="utf-8") as fh:
            held = json.load(fh).get("held")
    except (OSError, ValueError, AttributeError):
        return []
    return (
        sorted(n for n in held if isinstance(n, str) and re.match(r"^[a-z0-9][a-z0-9.+-]{0,127}$", n))
        if isinstance(held, list)
        else []
    )
