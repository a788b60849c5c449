"""Lab snapshots: each node of a provisioned lab kept as an image of its own, to start the next lab from.

Provisioning the lab from bare nodes (packages, the cable's fabric, ssh between ranks) is the slowest
part of most lab tests, and most of them test something else. `sparkplay lab snapshot NAME` commits each
running node (`docker commit`: its disk, not its memory or tmpfs) as `sparkplay-lab-snapshot:NAME-rank<i>`;
`sparkplay lab up --snapshot NAME` starts every rank from its own image, with its own machine-id and
ssh host keys, so the trust provisioning set up between the ranks holds.

A snapshot is only as good as the code that made it: `provisioning_key` hashes everything that decides
what provisioning leaves on a node (the base image, roles, playbooks, plugins, the Python they read,
recipes, inventory defaults), and callers name their snapshot by it, so a stale one is never used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from sparkplay.errors import BadInput, SparkplayError
from sparkplay.lab import dockercli

REPOSITORY = "sparkplay-lab-snapshot"
LABEL = "sparkplay.lab.snapshot"
# what decides the state provisioning leaves on a node, relative to the project
DECIDING = ("roles", "playbooks", "plugins", "src/sparkplay", "recipes", "group_vars", "ansible.cfg")
SKIPPED_PARTS = {"__pycache__", ".pytest_cache", "molecule"}


def validate_name(name: str) -> None:
    """A snapshot name is part of a Docker tag: letters, digits, '.', '_' and '-', 1 to 100 characters."""
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789._-")
    if not (0 < len(name) <= 100 and set(name) <= allowed and name[0] not in ".-"):
        raise BadInput(
            f"snapshot name {name!r} is not usable as an image tag",
            "use lower-case letters, digits, '.', '_' and '-' (at most 100, not starting with '.' or '-')",
        )


def tag(name: str, rank: int) -> str:
    return f"{REPOSITORY}:{name}-rank{rank}"


def _deciding_files(project: Path) -> Iterable[Path]:
    for top in DECIDING:
        path = project / top
        if path.is_file():
            yield path
        elif path.is_dir():
            for found in sorted(path.rglob("*")):
                rel = found.relative_to(project)
                if found.is_file() and not SKIPPED_PARTS & set(rel.parts) and found.suffix != ".pyc":
                    yield found
    yield from sorted(project.glob("*.yml"))


def provisioning_key(project: Path, base_image: str) -> str:
    """A short hash of the base image and every file that decides what provisioning leaves on a node."""
    digest = hashlib.sha256(f"base {base_image}\n".encode())
    for path in _deciding_files(project):
        digest.update(f"{path.relative_to(project)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def images(name: str, nodes: int) -> list[str] | None:
    """Each rank's snapshot image for `name`, or None unless every one of the `nodes` ranks has one."""
    validate_name(name)
    tags = [tag(name, rank) for rank in range(nodes)]
    found = {t for info in dockercli.inspect("image", tags) for t in info.get("RepoTags") or []}
    return tags if set(tags) <= found else None


def of_base(image: str, base: str, rank: int) -> bool:
    """Whether IMAGE is rank RANK's snapshot of nodes made from BASE (its layers begin with BASE's): `lab up`
    keeps a node started from one (a host's reboot re-wired, never the node wiped back to bare)."""
    if not (image.startswith(f"{REPOSITORY}:") and image.endswith(f"-rank{rank}")):
        return False
    found = {t: info for info in dockercli.inspect("image", [image, base]) for t in info.get("RepoTags") or []}
    if image not in found or base not in found:
        return False
    mine, theirs = ((found[t].get("RootFS") or {}).get("Layers") or [] for t in (image, base))
    return bool(theirs) and mine[: len(theirs)] == theirs


def save(name: str, containers: list[str]) -> list[str]:
    """Commit each running node (rank order) as its snapshot image; what was written, one line each."""
    validate_name(name)
    if not containers:
        raise SparkplayError("no lab nodes are running to snapshot", "start them first (sparkplay lab up)")
    said = []
    for rank, container in enumerate(containers):
        # commit pauses the node for the copy: its files are consistent with one moment of it
        dockercli.docker(["commit", "--change", f"LABEL {LABEL}={name}", container, tag(name, rank)], timeout=600)
        said.append(f"{container} kept as {tag(name, rank)}")
    return said


def remove_all() -> list[str]:
    """Remove every snapshot image (lab down --purge-images)."""
    listed = dockercli.docker(["images", "--format", "{{.Repository}}:{{.Tag}}", REPOSITORY])
    removed = []
    for image in listed.stdout.split():
        dockercli.docker(["rmi", image])
        removed.append(f"image {image} removed")
    return removed
