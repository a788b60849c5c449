"""The simulated ConnectX-7 cable between lab nodes.

A Spark's QSFP port shows up as two netdevs, one per PCIe domain (the
"twins"); the lab wires port 1's twins. Two nodes get a direct cable: one
veth pair per twin between the two network namespaces, created straight
into them so no half-made link is ever left in the host namespace. More
than two nodes are joined the way real Spark clusters are, through a
switch: one host bridge per twin, each node's twin plugged into it; or, as
NVIDIA documents for three Sparks, in a ring: each node's first twin cabled
straight to the next rank's second twin, so each twin reaches a different
neighbour and no switch is involved.

Links are brought up without addresses; addressing is the fabric role's job.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from sparkplay.errors import MissingPrerequisite, SparkplayError

TWINS: tuple[str, str] = ("enp1s0f1np1", "enP2p1s0f1np1")
SWITCH_PREFIX = "splab-sw"
PORT_PREFIX = "splab-r"
DANGLING_PREFIX = "splab-x"  # a host-side stand-in for a port's far end (lab/faults.py: a node off, a pulled cable)
SWITCH_MTU = 9216  # a switch carries jumbo frames plus headroom


@dataclass(frozen=True)
class LinkState:
    name: str
    ifindex: int
    peer_ifindex: int | None
    kind: str | None
    up: bool
    carrier: bool
    master: str | None = None

    @property
    def is_veth(self) -> bool:
        return self.kind == "veth"


def _ip(args: Sequence[str], pid: int | None = None, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *args] if pid is None else ["nsenter", "-t", str(pid), "-n", "ip", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError as exc:
        raise MissingPrerequisite(f"{cmd[0]} not found", "install iproute2 and util-linux (make setup)") from exc
    if check and proc.returncode != 0:
        where = "host" if pid is None else f"pid {pid}"
        raise SparkplayError(f"ip {' '.join(args)} ({where}) failed: {proc.stderr.strip()}")
    return proc


def read_links(pid: int | None = None) -> dict[str, LinkState]:
    """Every link in a namespace (the host's when pid is None), by name."""
    proc = _ip(["-j", "-d", "link", "show"], pid)
    links: dict[str, LinkState] = {}
    for entry in json.loads(proc.stdout or "[]"):
        flags = entry.get("flags", [])
        links[entry["ifname"]] = LinkState(
            name=entry["ifname"],
            ifindex=int(entry["ifindex"]),
            peer_ifindex=int(entry["link_index"]) if "link_index" in entry else None,
            kind=(entry.get("linkinfo") or {}).get("info_kind"),
            up="UP" in flags,
            carrier="LOWER_UP" in flags,
            master=entry.get("master"),
        )
    return links


def switch_name(twin: int) -> str:
    return f"{SWITCH_PREFIX}{twin}"


def port_name(rank: int, twin: int) -> str:
    return f"{PORT_PREFIX}{rank}t{twin}"


def uses_switch(nodes: int, topology: str = "switch") -> bool:
    return nodes > 2 and topology == "switch"


def ring_links(nodes: int) -> list[tuple[int, int]]:
    """(rank, next rank) for every cable of a ring: rank's first twin to the next rank's second twin."""
    return [(rank, (rank + 1) % nodes) for rank in range(nodes)]


def _veth_pair(a: LinkState, b: LinkState) -> bool:
    """Each end is the other's veth peer."""
    return a.is_veth and b.is_veth and a.peer_ifindex == b.ifindex and b.peer_ifindex == a.ifindex


def _direct_pair_ok(a: LinkState | None, b: LinkState | None) -> bool:
    return a is not None and b is not None and _veth_pair(a, b) and a.up and b.up and a.carrier and b.carrier


def _switch_port_ok(node_end: LinkState | None, host_end: LinkState | None, twin: int) -> bool:
    if node_end is None or host_end is None:
        return False
    return (
        _veth_pair(node_end, host_end)
        and host_end.master == switch_name(twin)
        and node_end.up
        and host_end.up
        and node_end.carrier
    )


def _wire_ring(pids: Sequence[int]) -> list[str]:
    changes: list[str] = []
    first, second = TWINS
    for rank, nxt in ring_links(len(pids)):
        a, b = read_links(pids[rank]).get(first), read_links(pids[nxt]).get(second)
        if _direct_pair_ok(a, b):
            continue
        for pid, twin, have in ((pids[rank], first, a), (pids[nxt], second, b)):
            if have is not None:  # deleting one end of a pair removes both (and a neighbour's old end)
                _ip(["link", "del", twin], pid, check=False)
        _ip(["link", "add", first, "netns", str(pids[rank]), "type", "veth", "peer", second, "netns", str(pids[nxt])])
        _ip(["link", "set", first, "up"], pids[rank])
        _ip(["link", "set", second, "up"], pids[nxt])
        changes.append(f"cable rank{rank} {first} <-> rank{nxt} {second}")
    return changes


def wire(pids: Sequence[int], topology: str = "switch") -> list[str]:
    """Make the cable match `pids` (rank order) and the topology; return what was changed."""
    changes: list[str] = []
    if len(pids) < 2:
        return changes
    if topology == "ring":
        return _wire_ring(pids)
    node_links = [read_links(pid) for pid in pids]
    if not uses_switch(len(pids)):
        for twin in TWINS:
            a, b = node_links[0].get(twin), node_links[1].get(twin)
            if _direct_pair_ok(a, b):
                continue
            for pid, have in ((pids[0], a), (pids[1], b)):
                if have is not None:  # deleting one end of a pair removes both
                    _ip(["link", "del", twin], pid, check=False)
            _ip(["link", "add", twin, "netns", str(pids[0]), "type", "veth", "peer", twin, "netns", str(pids[1])])
            for pid in pids[:2]:
                _ip(["link", "set", twin, "up"], pid)
            changes.append(f"cable {twin}: rank0 <-> rank1")
        return changes

    host = read_links()
    for t, twin in enumerate(TWINS):
        bridge = switch_name(t)
        if bridge not in host:
            _ip(["link", "add", bridge, "type", "bridge"])
            changes.append(f"switch {bridge} for {twin}")
        _ip(["link", "set", bridge, "mtu", str(SWITCH_MTU), "up"])
        for rank, pid in enumerate(pids):
            port = port_name(rank, t)
            if _switch_port_ok(node_links[rank].get(twin), host.get(port), t):
                continue
            for where, name in ((pid, twin), (None, port)):
                _ip(["link", "del", name], where, check=False)
            _ip(["link", "add", port, "mtu", str(SWITCH_MTU), "type", "veth", "peer", twin, "netns", str(pid)])
            _ip(["link", "set", port, "master", bridge, "up"])
            _ip(["link", "set", twin, "up"], pid)
            changes.append(f"cable {twin}: rank{rank} <-> {bridge}")
    return changes + allow_switch_forwarding()


FORWARD_CHAIN = "DOCKER-USER"  # Docker leaves this chain to users and keeps it ahead of its own rules
FORWARD_COMMENT = "sparkplay-lab switch"


def _iptables(args: Sequence[str]) -> subprocess.CompletedProcess[str] | None:
    tool = shutil.which("iptables")
    if tool is None:
        return None
    return subprocess.run([tool, "-w", *args], capture_output=True, text=True, check=False, timeout=30)


def _forward_rule(bridge: str) -> list[str]:
    return ["-i", bridge, "-o", bridge, "-j", "ACCEPT", "-m", "comment", "--comment", FORWARD_COMMENT]


def allow_switch_forwarding() -> list[str]:
    """Let frames cross the lab's switches. Docker sets the FORWARD policy to DROP and bridged frames pass
    through iptables (net.bridge.bridge-nf-call-iptables=1), so without this no packet crosses a switch."""
    changes = []
    for t in range(len(TWINS)):
        rule = _forward_rule(switch_name(t))
        check = _iptables(["-C", FORWARD_CHAIN, *rule])
        if check is None or check.returncode == 0:
            continue  # no iptables here (nothing filters), or the rule is there
        done = _iptables(["-I", FORWARD_CHAIN, "1", *rule])
        if done is not None and done.returncode != 0:
            raise RuntimeError(f"cannot allow forwarding across {switch_name(t)}: {done.stderr.strip()}")
        changes.append(f"forwarding allowed across {switch_name(t)} ({FORWARD_CHAIN})")
    return changes


def remove_switch_forwarding() -> list[str]:
    """Every rule allow_switch_forwarding added, found by its comment."""
    listed = _iptables(["-S", FORWARD_CHAIN])
    if listed is None or listed.returncode != 0:
        return []
    removed = []
    for line in listed.stdout.splitlines():
        if FORWARD_COMMENT in line and line.startswith(f"-A {FORWARD_CHAIN} "):
            _iptables(["-D", FORWARD_CHAIN, *shlex.split(line)[2:]])
            removed.append(line)
    return [f"removed forwarding rule: {line}" for line in removed]


def remove_switches(keep_for_nodes: int = 0, topology: str = "switch") -> list[str]:
    """Delete the lab's host bridges and ports and their forwarding rules (all, unless the lab needs them)."""
    if uses_switch(keep_for_nodes, topology):
        return []
    removed: list[str] = []
    for name in sorted(read_links()):
        if name.startswith((SWITCH_PREFIX, PORT_PREFIX)):
            _ip(["link", "del", name], check=False)
            removed.append(name)
    return [f"removed host link {name}" for name in removed] + remove_switch_forwarding()


def twin_states(pid: int | None) -> dict[str, str]:
    """'up', 'down' or 'missing' for each twin of one node (all missing if not running)."""
    if pid is None:
        return dict.fromkeys(TWINS, "missing")
    links = read_links(pid)
    states: dict[str, str] = {}
    for twin in TWINS:
        link = links.get(twin)
        states[twin] = "missing" if link is None else ("up" if link.carrier else "down")
    return states


def dangling_name(rank: int, twin: int) -> str:
    return f"{DANGLING_PREFIX}{rank}t{twin}"


def remove_dangling() -> list[str]:
    """Every host-side stand-in for a far end (once the cable is whole again, none is needed)."""
    removed = []
    for name in sorted(read_links()):
        if name.startswith(DANGLING_PREFIX):
            _ip(["link", "del", name], check=False)
            removed.append(f"removed host link {name}")
    return removed
