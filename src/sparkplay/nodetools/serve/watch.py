"""The leader's watcher: a worker that went away (its connection half-closed, or reset and gone) restarts
the leader."""

from __future__ import annotations

import argparse
import socket
import subprocess
import time
from collections.abc import Collection

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


def lost_peers(states: dict[str, set[str]], held: Collection[str] = ()) -> list[str]:
    """Workers that went away while the leader has no live connection to them: it still holds a half-closed
    one (CLOSE_WAIT, the worker sent FIN), or one it held (`held`) is gone from the table altogether (the
    worker died with unread bytes and the kernel sent RST: the leader's socket is closed, not listed)."""
    return [e for e, found in states.items() if TCP_ESTABLISHED not in found and (TCP_CLOSE_WAIT in found or e in held)]


class Watch:
    """The peers the unit's current main process held a live connection to: a reset one leaves no row."""

    def __init__(self, peers: list[str]) -> None:
        self.peers = peers
        self.pid = ""
        self.held: set[str] = set()

    def step(self, pid: str, uid: int | None, table: str) -> list[str]:
        if pid != self.pid:  # a new process: what the old one held says nothing of it
            self.pid, self.held = pid, set()
        states = connection_states(self.peers, table, uid)
        lost = lost_peers(states, self.held)
        self.held = {e for e, found in states.items() if TCP_ESTABLISHED in found}
        return lost


def cmd_watch(args: argparse.Namespace) -> int:
    print(f"watching {args.unit}'s connections to {', '.join(args.peers)}", flush=True)
    watch = Watch(args.peers)
    while True:
        time.sleep(args.interval)
        shown = unit_show(args.unit, "ActiveState", "MainPID")
        if shown.get("ActiveState") != "active":
            continue
        table = (PROC / "net" / "tcp").read_text(encoding="ascii")
        lost = watch.step(shown.get("MainPID", ""), main_uid(args.unit), table)
        if lost:
            print(f"{', '.join(lost)} went away: restarting {args.unit} so it reconnects", flush=True)
            subprocess.run(["systemctl", "restart", "--no-block", args.unit], check=False)
            time.sleep(args.interval * 3)
