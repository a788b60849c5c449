"""Day-two faults on the lab, as hardware shows them: a node rebooted or powered off, a cable pulled.

A lab node is a container, and a container's network namespace dies with it, taking its end of every veth
pair, and the peer's end with it. Real hardware does not behave so: a peer whose neighbour is off keeps
its port, with no carrier, and a rebooted node finds its cable where it was. So the lab stands in for the
port while the namespace is gone: each running node's twin that lost its pair is replaced by a veth whose
other end waits, down, in the host's namespace (the peer sees its twin UP with NO-CARRIER, as a Spark
shows an unplugged QSFP port), and a node that boots again is re-cabled as soon as its namespace exists,
before its own systemd brings the network up. A pulled cable is the same: both ends become such
dangling ports, so both nodes see no carrier; plugging it back wires the pair again.

What stays out of reach: RDMA link events and GPU state, neither of which the lab has (docs/lab.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from sparkplay.errors import BadInput, SparkplayError
from sparkplay.lab import cable, dockercli
from sparkplay.lab.manager import (
    RANK_LABEL,
    Report,
    _lab_containers,
    _lab_lock,
    _wait_systemd,
    container_name,
)


def _nodes() -> dict[int, dict]:
    """rank -> the container's inspect data, for every lab node (running or not)."""
    found = {}
    for info in _lab_containers().values():
        found[int(info["Config"]["Labels"].get(RANK_LABEL, "-1"))] = info
    if not found:
        raise SparkplayError("no lab nodes are there", "start them first: sparkplay lab up")
    return dict(sorted(found.items()))


def _rank(rank: int, nodes: dict[int, dict]) -> dict:
    if rank not in nodes:
        raise BadInput(f"rank {rank} is not a lab node", f"choose one of {', '.join(map(str, nodes))}")
    return nodes[rank]


def topology(project: Path) -> str:
    """The lab's cabling, as `lab up` wrote it into the lab inventory (switch unless it says ring)."""
    from sparkplay.lab import inventory

    settings = inventory.paths(project)[1]
    try:
        loaded = yaml.safe_load(settings.read_text()) or {}
    except OSError:
        return "switch"
    return str(loaded.get("fabric_topology") or "switch")


def _pid(info: dict) -> int | None:
    state = info["State"]
    return int(state["Pid"]) if state.get("Running") and state.get("Pid") else None


def _dangle(pid: int, rank: int, twins: Sequence[int]) -> list[str]:
    """Give a running node a port with no carrier for each of `twins` (index into cable.TWINS)."""
    changes = []
    for t in twins:
        twin, far = cable.TWINS[t], cable.dangling_name(rank, t)
        cable._ip(["link", "del", twin], pid, check=False)  # deleting an end deletes its pair
        cable._ip(["link", "del", far], check=False)
        cable._ip(["link", "add", far, "type", "veth", "peer", twin, "netns", str(pid)])
        cable._ip(["link", "set", twin, "up"], pid)  # the far end stays down: no carrier
        changes.append(f"rank{rank} {twin}: no carrier")
    return changes


def _dangle_orphans(nodes: dict[int, dict]) -> list[str]:
    """Every running node's twin that lost its pair (its neighbour's namespace is gone) becomes a port with
    no carrier; a switch keeps its ports, so only direct cables and rings lose anything."""
    changes = []
    for rank, info in nodes.items():
        pid = _pid(info)
        if pid is None:
            continue
        links = cable.read_links(pid)
        missing = [t for t, twin in enumerate(cable.TWINS) if twin not in links]
        changes += _dangle(pid, rank, missing)
    return changes


def _replug(project: Path, nodes: dict[int, dict]) -> list[str]:
    """Wire the cable again between the running nodes, as `lab up` does (only when all are running)."""
    pids = [_pid(info) for info in nodes.values()]
    if any(pid is None for pid in pids):
        return _dangle_orphans(nodes)
    changes = cable.wire([pid for pid in pids if pid is not None], topology(project))
    return changes + cable.remove_dangling()


def _start(name: str, timeout: float = 60) -> None:
    dockercli.docker(["start", name])
    deadline = time.monotonic() + timeout
    while not dockercli.inspect("container", [name])[0]["State"].get("Pid"):
        if time.monotonic() > deadline:
            raise SparkplayError(f"{name} did not start within {timeout:.0f} s", f"see docker logs {name}")
        time.sleep(0.05)


def power_off(project: Path, rank: int, *, hard: bool = False) -> Report:
    """Power a node off (a clean shutdown, or with `hard` the plug pulled); its peers keep their ports."""
    report = Report()
    with _lab_lock():
        nodes = _nodes()
        info = _rank(rank, nodes)
        name = container_name(rank)
        if _pid(info) is None:
            raise BadInput(f"{name} is already off", f"power it on: sparkplay lab on {rank}")
        if hard:
            dockercli.docker(["kill", "--signal", "SIGKILL", name])
        else:  # systemd's clean shutdown (the container's stop signal), as `poweroff` would
            dockercli.docker(["stop", "-t", "60", name], timeout=90)
        report.add(f"{name} powered off{' (plug pulled)' if hard else ''}")
        report.add(*_dangle_orphans(_nodes()))
    return report


def power_on(project: Path, rank: int) -> Report:
    """Power a node on: it boots with its cable where it was (re-plugged before its systemd is up)."""
    report = Report()
    with _lab_lock():
        nodes = _nodes()
        info = _rank(rank, nodes)
        name = container_name(rank)
        if _pid(info) is not None:
            raise BadInput(f"{name} is already on", f"power it off first: sparkplay lab off {rank}")
        _start(name)
        report.add(f"{name} powered on")
        report.add(*_replug(project, _nodes()))
        _wait_systemd([name])
    return report


def reboot(project: Path, rank: int, *, hard: bool = False) -> Report:
    """Reboot a node: off (cleanly, or `hard`: a reset) and straight back on, its cable kept."""
    report = power_off(project, rank, hard=hard)
    report.add(*power_on(project, rank).changes)
    return report


def _twin_indices(twin: str | None) -> list[int]:
    if twin is None:
        return list(range(len(cable.TWINS)))
    if twin not in cable.TWINS:
        raise BadInput(f"--twin {twin} is not a twin of the lab's cable", f"choose one of {', '.join(cable.TWINS)}")
    return [cable.TWINS.index(twin)]


def pull(project: Path, twin: str | None = None) -> Report:
    """Pull the cable (one twin, or both): every node's end of it shows no carrier until it is plugged."""
    report = Report()
    if cable.uses_switch(len(_nodes()), topology(project)) or topology(project) == "ring":
        raise BadInput(
            "lab cable pull simulates the direct cable of two nodes",
            "use a two-node lab (sparkplay lab up --nodes 2), or lab off RANK",
        )
    with _lab_lock():
        for rank, info in _nodes().items():
            pid = _pid(info)
            if pid is not None:
                report.add(*_dangle(pid, rank, _twin_indices(twin)))
    return report


def plug(project: Path) -> Report:
    """Plug every pulled cable back (the pair wired again; nothing happens to a cable that is in)."""
    report = Report()
    with _lab_lock():
        report.add(*_replug(project, _nodes()))
    return report
