"""What the gateway knows of each deployment besides its route: whether it can answer now, and if not, why.

Read each second from the deployment's watchdog state (the watchdog on its leader writes it: waiting for a
peer, a cable or a node; restarting every rank; stood down) where that leader is the gateway's own node, and
from a connection that fails for want of a route (a cable address with its twin down has an unreachable
route, fabric role). A request for such a deployment is answered at once with 503, Retry-After and the cause,
and the requests already in flight for it end with the same answer instead of hanging.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# the watchdog's states in which the deployment cannot answer now, and how to say so
UNAVAILABLE = {
    "waiting": "its watchdog waits: {why}",
    "restarting": "its watchdog is restarting every rank",
    "restarted-not-answering": "it did not answer after its watchdog restarted every rank",
    "stood-down": "its watchdog stood down: {why}",
}
# a state not written for this long is no word from a watchdog (stopped, or gone): nothing is said from it
STALE_S = 120.0
NO_ROUTE = (errno.EHOSTUNREACH, errno.ENETUNREACH)


def cause_of(path: str | None, now: float | None = None) -> str | None:
    """Why the deployment whose watchdog keeps `path` cannot answer now, or None (it can, or nothing says)."""
    if not path:
        return None
    try:
        state = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    updated = state.get("updated")
    if not isinstance(updated, int | float) or (now or time.time()) - updated > STALE_S:
        return None
    status = state.get("status")
    if status not in UNAVAILABLE:
        return None
    why = state.get("why")
    if status == "stood-down":
        why = (state.get("stood_down") or {}).get("why") if isinstance(state.get("stood_down"), dict) else None
    return UNAVAILABLE[str(status)].format(why=str(why or "no reason given")[:300])


def routed(url: str) -> bool:
    """Whether this node has a route to the address in `url` now: a UDP socket's connect() asks the kernel's
    routing alone (no packet is sent), and an unreachable route answers at once. A name, not an address, is
    taken as routed (resolving it is not this look's business)."""
    host = urlsplit(url).hostname or ""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return True
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))
        except OSError as exc:
            return exc.errno not in NO_ROUTE
    return True


def unreachable(exc: BaseException) -> bool:
    """Whether a connection failed for want of a route (its node's cable address is cut off)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in NO_ROUTE:
            return True
        seen = getattr(seen, "os_error", None) or seen.__cause__
    return False


class Watch:
    """Each served name's cause (None: it may answer), refreshed from the routes table each second."""

    def __init__(self, node: str | None) -> None:
        self.node = node
        self.causes: dict[str, str] = {}

    def look(self, table: dict[str, Any], now: float | None = None) -> dict[str, str]:
        """Read every watched route; return the names that became unavailable since the last look."""
        found: dict[str, str] = {}
        for name, route in table["models"].items():
            here = self.node is not None and route.get("host") == self.node
            cause = cause_of(route.get("watch"), now) if here else None
            if cause is None and not routed(str(route.get("url") or "")):
                # another node's deployment behind a cable that is down: even a connection the gateway holds
                # open to it (its keep-alive pool) would only wait
                where = f"its node {route['host']}" if route.get("host") else "its node"
                cause = f"no route to {where} (the cable or its twin is down)"
            if cause:
                found[name] = f"model {name!r} cannot answer now: {cause}"
        new = {name: cause for name, cause in found.items() if self.causes.get(name) != cause}
        self.causes = found
        return new
