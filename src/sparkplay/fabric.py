"""Cable addressing: one /24 per twin, each node's address derived from its rank."""

from __future__ import annotations

import ipaddress
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


def address_map(
    hosts: Iterable[str], hostvars: Mapping[str, Any], subnets: Sequence[str], offset: int
) -> dict[str, list[str]]:
    """Every node's cable CIDRs: its own `fabric_addresses` if set, else derived from its rank."""
    result: dict[str, list[str]] = {}
    for host in hosts:
        own = hostvars[host].get("fabric_addresses") or []
        result[host] = list(own) if own else twin_addresses(subnets, int(hostvars[host]["sparkplay_rank"]), offset)
    return result


def address_of(cidr: str) -> str:
    """The address part of a CIDR ('192.168.100.10/24' -> '192.168.100.10')."""
    return str(ipaddress.ip_interface(cidr).ip)


def ping_plan(addresses: Mapping[str, Sequence[str]], me: str, twins: Sequence[str]) -> list[dict[str, str]]:
    """One jumbo ping per peer per twin: out of my i-th twin to the peer's i-th address."""
    return [
        {"ifname": twin, "peer": peer, "address": address_of(cidrs[i])}
        for peer, cidrs in sorted(addresses.items())
        if peer != me
        for i, twin in enumerate(twins)
        if i < len(cidrs)
    ]


def peer_addresses(addresses: Mapping[str, Sequence[str]], me: str) -> list[dict[str, str]]:
    """Every other node's cable addresses, one entry per address."""
    return [
        {"peer": peer, "address": address_of(cidr)}
        for peer, cidrs in sorted(addresses.items())
        if peer != me
        for cidr in cidrs
    ]
