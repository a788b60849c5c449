"""Cable addressing, each node's addresses derived from its rank.

Two topologies. `switch` (a direct cable between two nodes is the same):
every node's twin i sits in subnet i. `ring` (NVIDIA's three-Spark ring):
link r joins rank r's first twin to rank r+1's second twin (mod n), one
subnet per link, so rank r's twins sit in subnets r and r-1. Peers that
share no subnet with a node are reached through routes: a /32 to each of a
peer's addresses via the next rank on the shortest way round, whose own
address on the shared link is the gateway (a relay forwards, see `relays`).
"""

from __future__ import annotations

import ipaddress
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def twin_addresses(subnets: Sequence[str], rank: int, offset: int = 10, count: int | None = None) -> list[str]:
    """CIDRs for one node: host `offset + rank` in each subnet, twin order (domain 0 first)."""
    addresses = []
    for subnet in subnets[: count if count is not None else len(subnets)]:
        network = ipaddress.ip_network(subnet, strict=True)
        host = network.network_address + offset + rank
        if host not in network or host in (network.network_address, network.broadcast_address):
            raise ValueError(f"rank {rank} with offset {offset} falls outside {subnet}")
        addresses.append(f"{host}/{network.prefixlen}")
    return addresses


TOPOLOGIES = ("switch", "ring")


def subnet_problem(subnets: Sequence[Any]) -> str:
    """Why `fabric_subnets` cannot address the cable ('' when it can): each entry a subnet, none overlapping
    another (two twins, or two ring links, on one subnet make the kernel's route choice a coin toss)."""
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for entry in subnets:
        try:
            network = ipaddress.ip_network(str(entry), strict=True)
        except ValueError:
            return f"fabric_subnets entry {entry!r} is not a subnet such as 192.168.100.0/24"
        clash = next((other for other in networks if network.overlaps(other)), None)
        if clash is not None:
            return (
                f"fabric_subnets {clash} and {network} overlap: each twin (each link in a ring) needs a subnet "
                "of its own"
            )
        networks.append(network)
    return ""


def node_subnets(subnets: Sequence[str], rank: int, nodes: int, topology: str = "switch") -> list[str]:
    """The subnets a node's twins sit in, twin order."""
    if topology == "switch":
        return list(subnets)
    if topology != "ring":
        raise ValueError(f"fabric_topology {topology!r} is not one of {', '.join(TOPOLOGIES)}")
    if nodes < 3 or len(subnets) != nodes:
        raise ValueError(f"a ring of {nodes} nodes needs 3 or more nodes and one subnet per link ({nodes})")
    return [subnets[rank % nodes], subnets[(rank - 1) % nodes]]


def address_map(
    hosts: Iterable[str], hostvars: Mapping[str, Any], subnets: Sequence[str], offset: int, topology: str = "switch"
) -> dict[str, list[str]]:
    """Every node's cable CIDRs: its own `fabric_addresses` if set, else derived from its rank."""
    hosts = list(hosts)
    result: dict[str, list[str]] = {}
    for host in hosts:
        own = hostvars[host].get("fabric_addresses") or []
        rank = int(hostvars[host]["sparkplay_rank"])
        result[host] = (
            list(own) if own else twin_addresses(node_subnets(subnets, rank, len(hosts), topology), rank, offset)
        )
    return result


def _shared(mine: Sequence[str], theirs: Sequence[str]) -> list[tuple[int, str]]:
    """(my twin index, their address) for each of their addresses in a subnet one of my twins is in."""
    networks = [ipaddress.ip_interface(c).network for c in mine]
    return [
        (networks.index(ipaddress.ip_interface(c).network), address_of(c))
        for c in theirs
        if ipaddress.ip_interface(c).network in networks
    ]


def _next_hops(addresses: Mapping[str, Sequence[str]], me: str) -> dict[str, str]:
    """For every peer, the neighbour a packet to it leaves through first (itself when adjacent); breadth first,
    ties to the lower-sorted neighbour, so every node computes the same ways round."""
    hosts = sorted(addresses)
    adjacent = {h: [p for p in hosts if p != h and _shared(addresses[h], addresses[p])] for h in hosts}
    first: dict[str, str] = {p: p for p in adjacent[me]}
    queue = deque(adjacent[me])
    while queue:
        host = queue.popleft()
        for peer in adjacent[host]:
            if peer != me and peer not in first:
                first[peer] = first[host]
                queue.append(peer)
    return first


def routes(addresses: Mapping[str, Sequence[str]], me: str, twins: Sequence[str]) -> list[dict[str, str]]:
    """The /32 routes a node needs to reach every peer address outside its own subnets: out of the twin that
    shares a link with the next hop, via the next hop's address on that link. Empty behind a switch."""
    hops = _next_hops(addresses, me)
    found = []
    for peer, cidrs in sorted(addresses.items()):
        if peer == me or peer not in hops:
            continue
        twin, gateway = _shared(addresses[me], addresses[hops[peer]])[0]
        local = {address for _, address in _shared(addresses[me], cidrs)}
        found += [
            {"ifname": twins[twin], "to": f"{address_of(c)}/32", "via": gateway, "peer": peer}
            for c in cidrs
            if address_of(c) not in local
        ]
    return found


# behind the connected routes (metric 0): used only while a twin's own route is gone (no carrier, a pulled cable)
UNREACHABLE_METRIC = 4242


def cable_subnets(addresses: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """An unreachable route for every subnet of the cable (the networks of every node's twin addresses), behind
    the connected ones: with a twin or the whole cable down, traffic for a cable address then fails at once
    ("no route to host") instead of leaving by the default route, onto the LAN."""
    networks = {ipaddress.ip_interface(c).network for cidrs in addresses.values() for c in cidrs}
    ordered = sorted(networks, key=lambda n: (n.version, int(n.network_address), n.prefixlen))
    return [{"to": str(n), "type": "unreachable", "metric": UNREACHABLE_METRIC} for n in ordered]


def relays(addresses: Mapping[str, Sequence[str]], me: str) -> bool:
    """Whether some other node's way to a third one passes through this node (it must forward)."""
    return any(
        hop == me for host in addresses if host != me for peer, hop in _next_hops(addresses, host).items() if peer != me
    )


def address_of(cidr: str) -> str:
    """The address part of a CIDR ('192.168.100.10/24' -> '192.168.100.10')."""
    return str(ipaddress.ip_interface(cidr).ip)


def ping_plan(addresses: Mapping[str, Sequence[str]], me: str, twins: Sequence[str]) -> list[dict[str, str]]:
    """One jumbo ping per link to each peer: out of my twin to the peer's address in the same subnet
    (behind a switch, my i-th twin to the peer's i-th address; in a ring, each neighbour over its link)."""
    mine = list(addresses.get(me) or [])[: len(twins)]  # a node whose twin is down may have fewer, or none
    return [
        {"ifname": twins[i], "peer": peer, "address": address}
        for peer, cidrs in sorted(addresses.items())
        if peer != me
        for i, address in _shared(mine, cidrs)
    ]


def peer_addresses(addresses: Mapping[str, Sequence[str]], me: str) -> list[dict[str, str]]:
    """Every other node's cable addresses, one entry per address."""
    return [
        {"peer": peer, "address": address_of(cidr)}
        for peer, cidrs in sorted(addresses.items())
        if peer != me
        for cidr in cidrs
    ]
