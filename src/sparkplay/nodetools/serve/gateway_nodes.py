"""The cluster page's nodes: each node's memory as admission counted it at the last `up` (MemTotal, the reserve,
each deployment's claim there; the routes file carries them, served.routes), which of those claims count
now (an on-demand model's only while it serves), and, on the gateway's own node, what is live: the memory
available, each engine's use against its limit (its cgroup, readable by any user) and the cable twins.

The gateway runs as a user of its own on the leader and reaches no other node but through their engines' APIs:
another node's live figures are `sparkplay status`'s to read, and the page says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import explain, memory

# the states in which a model on demand holds its claim (stopped or not yet asked for, it holds none)
HOLDING = ("serving", "loading")


def _meminfo() -> dict[str, int] | None:
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
    except OSError:
        return None
    kib = {k: int(v.split()[0]) for k, v in fields.items() if k in ("MemTotal", "MemAvailable")}
    return {"total_bytes": kib.get("MemTotal", 0) << 10, "available_bytes": kib.get("MemAvailable", 0) << 10}


def twins(env: Path | None) -> list[dict[str, Any]]:
    """The node's cable twins (the fabric env file names them, as `explain` reads it) and whether each has
    carrier; a twin's carrier is read under /sys/class/net by its last part alone."""
    found = []
    for twin in explain.fabric_twins(str(env) if env else None):
        try:
            carrier = (Path("/sys/class/net") / Path(twin).name / "carrier").read_text().strip() == "1"
        except OSError:
            carrier = False
        found.append({"name": twin, "carrier": carrier})
    return found


def local_units(table: dict[str, Any], node: str | None) -> list[str]:
    """The engine units of the models whose leader runs on the gateway's node (their memory is readable)."""
    return sorted({str(r["unit"]) for r in table["models"].values() if r.get("unit") and r.get("host") == node})


def live(units: list[str], fabric_env: Path | None) -> dict[str, Any]:
    """What the gateway's node shows live; blocking reads (the gateway runs this in a thread)."""
    return {"memory": _meminfo(), "twins": twins(fabric_env), "units": {u: memory.unit_use(u) for u in units}}


def nodes(table: dict[str, Any], states: dict[str, str], here: str | None, now: dict[str, Any]) -> list[dict[str, Any]]:
    """Each node: MemTotal, the reserve, each claim (model, bytes, on demand, state, and on the gateway's node its
    engine's use and limit), what counts now, the budget for models on demand; live figures for `here`."""
    hosts = sorted({*table.get("nodes", {}), *(r.get("host") for r in table["models"].values() if r.get("host"))})
    out = []
    for host in hosts:
        counted = table.get("nodes", {}).get(host, {})
        claims = []
        for name, size in sorted(counted.get("claims", {}).items()):
            route = table["models"].get(name, {})
            on_demand = bool(route.get("on_demand"))
            claim = {"model": name, "bytes": size, "on_demand": on_demand, "state": states.get(name, "unknown")}
            if host == here and route.get("host") == here and route.get("unit"):
                claim["use"] = now.get("units", {}).get(route["unit"])
            claims.append(claim)
        row: dict[str, Any] = {
            "name": host,
            "here": host == here,
            "total_bytes": counted.get("total_bytes"),
            "reserve_bytes": counted.get("reserve_bytes"),
            "claims": claims,
            "counted_bytes": sum(c["bytes"] for c in claims if not c["on_demand"] or c["state"] in HOLDING),
            "on_demand_budget_bytes": (table.get("budgets") or {}).get(host),
        }
        if host == here:
            row |= {"memory": now.get("memory"), "twins": now.get("twins", [])}
        out.append(row)
    return out
