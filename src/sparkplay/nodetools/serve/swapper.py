"""The swapper: the gateway's hands for models served on demand. The gateway runs unprivileged; starting and
stopping units needs root, so this small root unit takes one request a connection on a unix socket only the
gateway's group may open, `{"op": "start"|"stop", "model": NAME}`, and answers `{"ok": true}` or
`{"ok": false, "error": "..."}`.

It acts only on a model the routes file (root's, read as the gateway reads it) marks on demand, starts one
only when the node's budget for models on demand holds its claim beside those running there (checked here,
not taken from the gateway), and only on that model's own units
(`sparkplay-serve@SLOT.service` and its watchdog, named in the routes by the serve
role and checked against the slot here): a gateway taken over can start or stop a model on demand, nothing
else. A model on another node is started over the peer ssh trust, as a group engine's workers are.
"""

from __future__ import annotations

import argparse
import asyncio
import grp
import ipaddress
import json
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .gateway_files import Routes
from .group import on_peer

# a recipe name, as sparkplay.recipes.model.NAME_PATTERN allows it (64 characters at most); the node tool keeps
# its own copy (it runs on the node alone), held equal by tests/test_gateway_demand.py
SLOT = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}\Z")
MAX_LINE = 4096


def _say(line: str) -> None:
    print(f"sparkplay-swapper: {line}", file=sys.stderr, flush=True)


def units_of(route: dict[str, Any]) -> list[str]:
    """The model's units, each checked to be sparkplay's unit of the model's own slot."""
    slot = str(route.get("slot") or "")
    if not SLOT.match(slot):
        raise ValueError("it is not an added deployment")
    units = [str(u) for u in route.get("units") or []]
    allowed = {f"sparkplay-serve@{slot}.service", f"sparkplay-serve-watchdog@{slot}.service"}
    if not units or not set(units) <= allowed:
        raise ValueError(f"its units {units} are not sparkplay's units of {slot}")
    return sorted(units, key=lambda u: "watchdog" in u)  # the engine first, then its watchdog


def systemctl(route: dict[str, Any], op: str, units: list[str]) -> tuple[bool, str]:
    """`systemctl OP UNITS` where the model runs: here when its API is on loopback, else on the node its API
    address is (over the peer ssh trust)."""
    ordered = units if op == "start" else list(reversed(units))
    host = urlsplit(route["url"]).hostname or ""
    try:
        local = ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False, f"{host} is not an address"
    argv = ["systemctl", op, "--", *ordered]
    if local:
        import subprocess

        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    else:
        done = on_peer(host, argv, timeout=300)
    return done.returncode == 0, (done.stderr or done.stdout).strip()[-300:]


def running(route: dict[str, Any]) -> bool:
    """Whether a model on demand's engine unit is active where it runs."""
    ok, _ = systemctl(route, "is-active", units_of(route)[:1])
    return ok


def over_budget(table: dict[str, Any], name: str, is_running: Any = None) -> str | None:
    """Why starting `name` would take its node past the budget for models on demand (the routes' `budgets`,
    the serve role's), counting the claims of those running there now, or None when it fits. The swapper
    checks this itself: the gateway that asks is not trusted to have."""
    is_running = is_running or running
    route = table["models"][name]
    host = route.get("host") or ""
    budget = (table.get("budgets") or {}).get(host)
    if budget is None:
        return None  # a routes file with no budget for the node: nothing to hold it to
    held = [
        (other, r["claim"])
        for other, r in sorted(table["models"].items())
        if other != name and r.get("on_demand") and r.get("host") == host and is_running(r)
    ]
    used = sum(claim for _, claim in held)
    if used + route["claim"] <= budget:
        return None
    names = ", ".join(other for other, _ in held) or "nothing"
    return (
        f"{name} claims {route['claim'] / 2**30:.1f} GiB and {names} hold {used / 2**30:.1f} GiB of the "
        f"{budget / 2**30:.1f} GiB {host} keeps for models on demand: stop one first"
    )


async def serve_one(routes: Routes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        line = await asyncio.wait_for(reader.readline(), 10)
        asked = json.loads(line[:MAX_LINE]) if line.endswith(b"\n") and len(line) <= MAX_LINE else None
        if not isinstance(asked, dict) or asked.get("op") not in ("start", "stop"):
            raise ValueError('not {"op": "start"|"stop", "model": NAME}')
        name = str(asked.get("model"))
        route = routes.current()["models"].get(name)
        if route is None or not route.get("on_demand"):
            raise ValueError(f"{name!r} is no model served on demand here")
        units = units_of(route)
        loop = asyncio.get_running_loop()
        if asked["op"] == "start":
            refused = await loop.run_in_executor(None, over_budget, routes.current(), name)
            if refused:
                raise ValueError(refused)
        ok, said = await loop.run_in_executor(None, systemctl, route, asked["op"], units)
        _say(f"{asked['op']} {name} ({', '.join(units)}): {'done' if ok else 'failed: ' + said}")
        answer = {"ok": True} if ok else {"ok": False, "error": f"systemctl {asked['op']} failed: {said}"}
    except (ValueError, TimeoutError, OSError) as exc:
        _say(f"refused: {exc}")
        answer = {"ok": False, "error": str(exc)}
    try:
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
    finally:
        writer.close()


async def run(args: argparse.Namespace) -> None:
    routes = Routes(Path(args.routes))
    routes.current(force=True)
    path = Path(args.socket)
    path.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(lambda r, w: serve_one(routes, r, w), path=str(path))
    os.chown(path, 0, grp.getgrnam(args.group).gr_gid if args.group else 0)
    path.chmod(0o660)  # the gateway's group opens it; nobody else
    _say(f"taking requests on {path}")
    async with server:
        await server.serve_forever()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--routes", required=True, help="the gateway's routes file (root's)")
    p.add_argument("--socket", required=True, help="the unix socket the gateway asks on")
    p.add_argument("--group", help="the group that may open the socket (the gateway's)")


def cmd_swapper(args: argparse.Namespace) -> int:
    asyncio.run(run(args))
    return 0
