"""`sparkplay lab up|down|status`: the two-node (or N-node) lab, converged idempotently.

Each node is a systemd container named `sparkplay-lab-rank<i>` on a
management network; the cable is wired by sparkplay.lab.cable. Every object
the lab creates carries the label `sparkplay.lab`, and `down` removes only
objects with that label (plus the host links and inventory files it named).
This module is the only implementation: the molecule scenario calls it.
"""

from __future__ import annotations

import fcntl
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sparkplay import fabric, paths
from sparkplay.errors import BadInput, MissingPrerequisite, SparkplayError
from sparkplay.lab import cable, dockercli, inventory, snapshot, staging, trust
from sparkplay.lab.image import ImageRecipe, ensure_image

LABEL = "sparkplay.lab"
RANK_LABEL = "sparkplay.lab.rank"
NETWORK = "sparkplay-lab"
CONTAINER_PREFIX = "sparkplay-lab-rank"
MIN_NODES, MAX_NODES = 1, 8
SYSTEMD_READY_STATES = ("running", "degraded")


def container_name(rank: int) -> str:
    return f"{CONTAINER_PREFIX}{rank}"


def validate_nodes(nodes: int) -> None:
    if not MIN_NODES <= nodes <= MAX_NODES:
        raise BadInput(
            f"--nodes {nodes} is out of range",
            f"choose {MIN_NODES} to {MAX_NODES} lab nodes (2 is a Spark pair)",
        )


def cgroup_v2_root() -> Path:
    """The host's cgroup v2 tree to bind as the node's /sys/fs/cgroup.

    The node's systemd (forky) refuses cgroup v1. On a pure v2 host the tree
    is /sys/fs/cgroup; on a v1 "hybrid" host it is /sys/fs/cgroup/unified.
    """
    for candidate in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (candidate / "cgroup.controllers").exists():
            return candidate
    raise MissingPrerequisite(
        "this host has no cgroup v2 hierarchy",
        "boot with systemd.unified_cgroup_hierarchy=1 (or a hybrid layout) to run the lab",
    )


# Where a node sees the host's cgroup v1 memory hierarchy, on a "hybrid" host whose memory controller is
# not in the v2 tree: the node's systemd cannot enforce MemoryMax= there, and sparkplay's memory guard
# (sparkplay-serve memguard) uses this hierarchy instead, as it would on such a host outside the lab.
NODE_MEMORY_HIERARCHY = "/opt/sparkplay-lab/memory"


def _memory_hierarchy() -> list[str]:
    v1 = Path("/sys/fs/cgroup/memory")
    if (v1 / "memory.limit_in_bytes").exists() and cgroup_v2_root() != Path("/sys/fs/cgroup"):
        return ["-v", f"{v1}:{NODE_MEMORY_HIERARCHY}:rw"]
    return []


@dataclass
class Report:
    """What a lab command did, for the CLI to print."""

    changes: list[str] = field(default_factory=list)

    def add(self, *items: str) -> None:
        self.changes.extend(items)


@contextmanager
def _lab_lock() -> Iterator[None]:
    # Two `lab up`s at once would race on container and link names.
    path = Path(tempfile.gettempdir()) / "sparkplay-lab.lock"
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _lab_containers() -> dict[str, dict]:
    names = dockercli.ids_with_label("container", LABEL)
    return {c["Name"].lstrip("/"): c for c in dockercli.inspect("container", names)}


def _ensure_network(report: Report) -> str:
    found = dockercli.inspect("network", [NETWORK])
    if found and found[0].get("Labels", {}).get(LABEL) == "1":
        return found[0]["Id"]
    if found:
        raise SparkplayError(
            f"a Docker network named {NETWORK} exists but was not made by sparkplay",
            f"remove or rename it (docker network rm {NETWORK})",
        )
    dockercli.docker(["network", "create", "--label", f"{LABEL}=1", NETWORK])
    report.add(f"network {NETWORK} created")
    return dockercli.inspect("network", [NETWORK])[0]["Id"]


def systemd_flags(cgroup_root: Path) -> list[str]:
    """`docker create` options for a container that boots systemd: the capabilities it needs (--privileged fails
    on these hosts, "unable to apply caps"), the host's cgroup tree, /run as tmpfs, and systemd's clean-shutdown
    signal (without it every stop waits 10 s)."""
    caps = ["--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cgroupns=host"]
    runtime = ["--tmpfs", "/run", "--tmpfs", "/run/lock", "--stop-signal", "SIGRTMIN+3"]
    return [*caps, "-v", f"{cgroup_root}:/sys/fs/cgroup:rw", *runtime]


def _run_node(rank: int, tag: str, cgroup_root: Path, *, from_snapshot: bool = False) -> None:
    name = container_name(rank)
    dockercli.docker(
        [
            "create",
            "--name",
            name,
            "--hostname",
            name,
            "--label",
            f"{LABEL}=1",
            "--label",
            f"{RANK_LABEL}={rank}",
            "--network",
            NETWORK,
            *systemd_flags(cgroup_root),
            *_memory_hierarchy(),
            # a node's /dev/shm is half its memory; docker's default 64 MB is too small for vLLM's
            # shared-memory broadcast between its processes (160 MiB with tensor parallel 2)
            "--shm-size",
            "1g",
            tag,
        ]
    )
    # systemd gives every container of one image the same machine-id on its
    # first boot here, so each node gets its own before it boots. A snapshot
    # is one rank's own disk: it keeps that rank's identity (and host keys).
    if not from_snapshot:
        with tempfile.NamedTemporaryFile("w", suffix=".machine-id") as fh:
            fh.write(uuid.uuid4().hex + "\n")
            fh.flush()
            dockercli.docker(["cp", fh.name, f"{name}:/etc/machine-id"])
    dockercli.docker(["start", name])


def _converge_nodes(tags: list[str], network_id: str, report: Report, *, from_snapshot: bool) -> None:
    nodes = len(tags)
    existing = _lab_containers()
    cgroup_root = cgroup_v2_root()
    for name, info in sorted(existing.items()):
        rank = int(info["Config"]["Labels"].get(RANK_LABEL, "-1"))
        if not 0 <= rank < nodes:
            dockercli.docker(["rm", "-f", name])
            report.add(f"{name} removed (not part of a {nodes}-node lab)")
    for rank, tag in enumerate(tags):
        name = container_name(rank)
        info = existing.get(name)
        if info is None:
            # a container of that name not labelled by us is the user's: never touch it
            if dockercli.inspect("container", [name]):
                raise SparkplayError(
                    f"a container named {name} exists but was not made by sparkplay",
                    f"remove or rename it (docker rm -f {name})",
                )
            _run_node(rank, tag, cgroup_root, from_snapshot=from_snapshot)
            report.add(f"{name} created" + (f" from {tag}" if from_snapshot else ""))
            continue
        networks = info.get("NetworkSettings", {}).get("Networks", {})
        attached = any(net.get("NetworkID") == network_id for net in networks.values())
        half_made = info["State"]["Status"] == "created"  # an interrupted run stopped before start
        mounts = {m.get("Destination") for m in info.get("Mounts") or []}
        unbound = bool(_memory_hierarchy()) and NODE_MEMORY_HIERARCHY not in mounts
        image = info["Config"]["Image"]
        other_image = image != tag and (from_snapshot or not snapshot.of_base(image, tag, rank))
        if other_image or not attached or half_made or unbound:
            why = (
                "image changed"
                if other_image
                else "left half-made by an interrupted run"
                if half_made
                else "made before the memory guard's hierarchy was bound"
                if unbound
                else "management network was replaced"
            )
            dockercli.docker(["rm", "-f", name])
            _run_node(rank, tag, cgroup_root, from_snapshot=from_snapshot)
            report.add(f"{name} recreated ({why})")
        elif not info["State"]["Running"]:
            dockercli.docker(["start", name])
            report.add(f"{name} started")


def _wait_systemd(names: list[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    pending = list(names)
    state = ""
    while pending:
        name = pending[0]
        proc = dockercli.docker(["exec", name, "systemctl", "is-system-running"], check=False, timeout=30)
        state = proc.stdout.strip()
        if state in SYSTEMD_READY_STATES:
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise SparkplayError(
                f"systemd in {name} did not come up within {timeout:.0f} s (state {state or 'unknown'})",
                f"see docker logs {name}; then sparkplay lab down && sparkplay lab up",
            )
        time.sleep(0.25)


def _pids(names: list[str]) -> list[int]:
    infos = {c["Name"].lstrip("/"): c for c in dockercli.inspect("container", names)}
    return [int(infos[name]["State"]["Pid"]) for name in names]


def validate_topology(nodes: int, topology: str) -> None:
    if topology not in fabric.TOPOLOGIES:
        raise BadInput(f"--topology {topology} is not known", f"choose one of {', '.join(fabric.TOPOLOGIES)}")
    if topology == "ring" and nodes < 3:
        raise BadInput(f"a ring of {nodes} node(s) is a direct cable", "use --topology ring with 3 or more nodes")


def up(
    nodes: int,
    project: Path,
    *,
    topology: str = "switch",
    recipe: ImageRecipe | None = None,
    snapshot_name: str | None = None,
    say: Callable[[str], None] = print,
) -> Report:
    """Bring the lab to `nodes` running, cabled nodes and write its inventory; with `snapshot_name`, each rank
    starts from its snapshot image (sparkplay.lab.snapshot) instead of the bare node image."""
    validate_nodes(nodes)
    validate_topology(nodes, topology)
    dockercli.require_engine()
    cgroup_v2_root()  # fail before building anything on a host that cannot run it
    report = Report()
    with _lab_lock():
        if snapshot_name is not None:
            tags = snapshot.images(snapshot_name, nodes)
            if tags is None:
                raise BadInput(
                    f"no snapshot {snapshot_name!r} of {nodes} lab node(s) exists",
                    f"make one from a running lab (sparkplay lab snapshot {snapshot_name}) or leave out --snapshot",
                )
        else:
            tag, built = ensure_image(recipe or ImageRecipe(), say=say)
            if built:
                report.add(f"image {tag} built")
            tags = [tag] * nodes
        network_id = _ensure_network(report)
        _converge_nodes(tags, network_id, report, from_snapshot=snapshot_name is not None)
        names = [container_name(rank) for rank in range(nodes)]
        _wait_systemd(names)
        cas = trust.host_cas()
        report.add(*(said for name in names if (said := trust.trust(name, cas))))
        report.add(*cable.remove_switches(keep_for_nodes=nodes, topology=topology))
        report.add(*cable.wire(_pids(names), topology))
        report.add(*cable.remove_dangling())
        report.add(*(f"{path} written" for path in inventory.write(paths.data_dir(project), names, topology)))
        staged = staging.stage(names[0], paths.cache_dir(project) / "lab")
        if staged:
            report.add(staged)
    return report


def down(project: Path, *, purge_images: bool = False) -> Report:
    """Remove every container, network and host link the lab made, and its inventory."""
    dockercli.require_engine()
    report = Report()
    with _lab_lock():
        containers = sorted(_lab_containers())
        for name in containers:
            # stop first so systemd shuts down cleanly (SIGRTMIN+3), then remove
            dockercli.docker(["stop", "-t", "20", name], check=False, timeout=60)
            dockercli.docker(["rm", "-f", name])
            report.add(f"{name} removed")
        report.add(*cable.remove_switches())
        report.add(*cable.remove_dangling())
        for network in dockercli.ids_with_label("network", LABEL):
            dockercli.docker(["network", "rm", network])
            report.add(f"network {network} removed")
        report.add(*(f"{path} removed" for path in inventory.remove(paths.data_dir(project))))
        if purge_images:
            report.add(*snapshot.remove_all())
            images = dockercli.docker(["images", "--format", "{{.Repository}}:{{.Tag}}", "sparkplay-lab-node"])
            for image in images.stdout.split():
                dockercli.docker(["rmi", image])
                report.add(f"image {image} removed")
    return report


def save_snapshot(name: str) -> Report:
    """Keep each running lab node's disk as `name` (sparkplay.lab.snapshot), for `up --snapshot NAME`."""
    dockercli.require_engine()
    report = Report()
    with _lab_lock():
        running = sorted(
            (int(info["Config"]["Labels"].get(RANK_LABEL, "-1")), name_)
            for name_, info in _lab_containers().items()
            if info["State"]["Running"]
        )
        ranks = [rank for rank, _ in running]
        if ranks != list(range(len(ranks))):
            raise SparkplayError(
                f"the lab's running ranks are {ranks}, not 0 to {len(ranks) - 1}",
                "bring every node up first (sparkplay lab up), then snapshot",
            )
        report.add(*snapshot.save(name, [name_ for _, name_ in running]))
    return report


@dataclass(frozen=True)
class NodeStatus:
    rank: int
    container: str
    state: str
    systemd: str
    links: dict[str, str]


def status() -> list[NodeStatus]:
    """One row per lab node found (by label), in rank order."""
    dockercli.require_engine()
    rows: list[NodeStatus] = []
    for name, info in _lab_containers().items():
        rank = int(info["Config"]["Labels"].get(RANK_LABEL, "-1"))
        running = bool(info["State"]["Running"])
        systemd = "-"
        if running:
            proc = dockercli.docker(["exec", name, "systemctl", "is-system-running"], check=False, timeout=30)
            systemd = proc.stdout.strip() or "unknown"
        links = cable.twin_states(int(info["State"]["Pid"]) if running else None)
        rows.append(NodeStatus(rank, name, info["State"]["Status"], systemd, links))
    return sorted(rows, key=lambda row: row.rank)
