"""The leader's watcher: a worker that went away (CLOSE_WAIT on its connection) restarts the leader."""

from __future__ import annotations

import argparse
import socket
import subprocess
import time

from .common import PROC, TCP_CLOSE_WAIT, TCP_ESTABLISHED, _endpoint, main_uid, unit_show


def _hex_endpoint(endpoint: str) -> str:
    """'192.168.100.11:50052' as /proc/net/tcp spells a remote address ('0B64A8C0:C384')."""
    host, port = _endpoint(endpoint)
    packed = socket.inet_aton(host)
    return f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"


def connection_states(endpoints: list[str], tcp_table: str, uid: int | None = None) -> dict[str, set[str]]:
    """For each endpoint, the TCP states of the sockets in this netns whose remote end is it (only those of
    `uid`, the engine's user, when given: another user's half-closed socket says nothing of the engine)."""
    wanted = {_hex_endpoint(e): e for e in endpoints}
    states: dict[str, set[str]] = {e: set() for e in endpoints}
    for line in tcp_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 7 and fields[2] in wanted and (uid is None or fields[7] == str(uid)):
            states[wanted[fields[2]]].add(fields[3])
    return states


def lost_peers(states: dict[str, set[str]]) -> list[str]:
    """Workers that closed their end while the leader still holds it (CLOSE_WAIT) and has no live one."""
    return [e for e, found in states.items() if TCP_CLOSE_WAIT in found and TCP_ESTABLISHED not in found]


def cmd_watch(args: argparse.Namespace) -> int:
    print(f"watching {args.unit}'s connections to {', '.join(args.peers)}", flush=True)
    while True:
        time.sleep(args.interval)
        if unit_show(args.unit, "ActiveState").get("ActiveState") != "active":
            continue
        table = (PROC / "net" / "tcp").read_text(encoding="ascii")
        lost = lost_peers(connection_states(args.peers, table, main_uid(args.unit)))
        if lost:
            print(f"{', '.join(lost)} went away: restarting {args.unit} so it reconnects", flush=True)
            subprocess.run(["systemctl", "restart", "--no-block", args.unit], check=False)
            time.sleep(args.interval * 3)
