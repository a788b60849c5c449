"""The peer firewall: the engines' inter-rank ports answer only the ranks' own cable addresses.

torch's TCPStore (vLLM's and Atlas's master port), Ray's GCS and vLLM's
data-parallel RPC listen on every address, and none of them authenticates a
caller; sparkplay cannot make them bind the cable. So each rank gets an
nftables table of its own (`inet sparkplay`, one base chain at the input
hook) that accepts those ports from loopback and from the cable addresses
of the deployment's ranks, and drops them from anywhere else. Nothing else
is filtered: every other port, and every other table, is left as it is.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkplay.errors import BadInput

TABLE = "sparkplay"
UNIT = "sparkplay-peer-firewall.service"
FILE = "/etc/sparkplay/peer-firewall.nft"
NFT = "/usr/sbin/nft"


def cable_addresses(fabric_envs: Iterable[Mapping[str, str]]) -> list[str]:
    """Every rank's cable addresses (each twin's), from their fabric.env, checked to be addresses."""
    found: set[str] = set()
    for env in fabric_envs:
        for text in str(env.get("SPARKPLAY_FABRIC_ADDRESSES", "")).split(","):
            if text:
                try:
                    found.add(str(ipaddress.ip_address(text.strip())))
                except ValueError:
                    raise BadInput(f"fabric address {text!r} is not an address", "run provision.yml again") from None
    return sorted(found, key=ipaddress.ip_address)


def names(slot: str | None) -> dict[str, str]:
    """The primary's table and file, or an added deployment's own (its rules load and go with it); its unit is
    named with the deployment's other units (engines/names.py)."""
    if slot is None:
        return {"file": FILE, "table": TABLE}
    return {
        "file": FILE.replace(".nft", f"@{slot}.nft"),
        "table": f"{TABLE}_{hashlib.sha256(slot.encode()).hexdigest()[:12]}",
    }


def ruleset(ports: Sequence[int], peers: Sequence[str], table: str = TABLE) -> str:
    """The nft file for one rank: idempotent to load again (the table is made, deleted, made anew)."""
    if not ports:
        return ""
    for port in ports:
        if not 0 < int(port) < 65536:
            raise BadInput(f"peer port {port} is not a port", "fix the engine adapter")
    listed = ", ".join(str(p) for p in sorted(set(int(p) for p in ports)))
    v4 = [a for a in peers if ipaddress.ip_address(a).version == 4]
    v6 = [a for a in peers if ipaddress.ip_address(a).version == 6]
    lines = [
        f"# sparkplay: the engine's inter-rank ports ({listed}) answer loopback and the ranks' cable only",
        f"table inet {table}",
        f"delete table inet {table}",
        f"table inet {table} {{",
        "  chain peers {",
        "    type filter hook input priority filter; policy accept;",
        '    iif "lo" accept',
    ]
    if v4:
        lines.append(f"    tcp dport {{ {listed} }} ip saddr {{ {', '.join(v4)} }} accept")
    if v6:
        lines.append(f"    tcp dport {{ {listed} }} ip6 saddr {{ {', '.join(v6)} }} accept")
    lines += [f"    tcp dport {{ {listed} }} drop", "  }", "}"]
    return "\n".join(lines) + "\n"


def plan_for(
    ranks: Sequence[dict[str, Any]], fabric_envs: Iterable[Mapping[str, str]], slot: str | None = None, unit: str = UNIT
) -> dict[str, Any]:
    """Each rank's ruleset (empty where it listens for no peer), under the same peers for every rank, in the
    deployment's own table (`slot`: an added deployment's) loaded by its `unit`."""
    peers = cable_addresses(fabric_envs)
    named = names(slot)
    for rank_plan in ranks:
        rank_plan["firewall"] = ruleset(rank_plan.get("peer_ports") or [], peers, named["table"])
    return {**named, "unit": unit, "nft": NFT}
