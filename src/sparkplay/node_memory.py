"""Each node's memory as admission counts it, for the gateway's routes: the budget for models on demand and
the figures the cluster page shows (MemTotal, the reserve, each deployment's claim on that node).

The records read back are the admitted set (served.py); `new` is this run's deployment, whose claim per
node admission has just worked out (a record of it is not on disk yet).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparkplay import admission


def _meminfo(text: Any) -> str:
    """A node's /proc/meminfo text, from its admission read ({meminfo: TEXT}) or the text itself."""
    return str(text.get("meminfo") if isinstance(text, Mapping) else text)


def _bytes(claim: Any) -> int:
    return int((claim or {}).get("bytes") or 0) if isinstance(claim, Mapping) else 0


def counted(
    found: Iterable[Mapping[str, Any]], drop_slots: Iterable[Any], new: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every claim admission counts, one per deployment and node: {host, name (served), on_demand, bytes}.
    The records of a slot in `drop_slots` (replaced or stopped) are not counted; `new`'s are, on each node its
    `claims` name (host -> {bytes}), or on its leader's host alone."""
    dropped = set(drop_slots)
    rows = [
        {"host": r.get("host"), "name": r.get("served_name"), "on_demand": bool(r.get("on_demand"))}
        | {"bytes": _bytes(r.get("claim"))}
        for r in found
        if r.get("slot") not in dropped
    ]
    if new is not None:
        claims = new.get("claims") or {new.get("host"): new.get("claim")}
        rows += [
            {"host": host, "name": new.get("served_name"), "on_demand": bool(new.get("on_demand"))}
            | {"bytes": _bytes(claim)}
            for host, claim in claims.items()
        ]
    return [row for row in rows if row["host"] and row["bytes"] > 0]


def budgets(rows: Iterable[Mapping[str, Any]], demand: Mapping[str, Any]) -> dict[str, int]:
    """Each node's memory for models on demand at once: serve_on_demand_budget_gib where set, else what the
    admission rule leaves (MemTotal less the reserve and every always-on deployment's claim there; `rows` as
    counted() gives them)."""
    given = float(demand.get("budget_gib") or 0)
    rows = list(rows)
    out = {}
    for host, text in (demand.get("meminfo") or {}).items():
        if given > 0:
            out[host] = int(given * admission.GIB)
            continue
        pinned = sum(row["bytes"] for row in rows if row["host"] == host and not row["on_demand"])
        out[host] = max(0, admission.meminfo(_meminfo(text))[0] - admission.RESERVE - pinned)
    return out


def nodes(rows: Iterable[Mapping[str, Any]], demand: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the page shows of each node as admission saw it at this run: MemTotal, the reserve kept for the
    system, and each deployment's claim there by served name (`rows` as counted() gives them)."""
    rows = list(rows)
    return {
        str(host): {
            "total_bytes": admission.meminfo(_meminfo(text))[0],
            "reserve_bytes": admission.RESERVE,
            "claims": {str(row["name"]): row["bytes"] for row in rows if row["host"] == host},
        }
        for host, text in sorted((demand.get("meminfo") or {}).items())
    }


def recount(before: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The nodes of an earlier routes file with their claims counted again from `rows` (a deployment stopped:
    its claims go; MemTotal and the reserve stay as admission last read them)."""
    rows = list(rows)
    return {
        str(host): {**node, "claims": {str(r["name"]): r["bytes"] for r in rows if r["host"] == host}}
        for host, node in before.items()
        if isinstance(node, Mapping)
    }
