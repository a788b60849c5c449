"""What `stop` takes down on a node, in which order, from the records read back (sparkplay.served).

Watchdogs first (one left running would see a silent API and start every rank again), then the watchers,
the leaders, the workers; each added deployment's peer firewall after its ranks. The names come from the
records rule (derived from each record's slot), never from paths a record holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparkplay.engines.names import TOOLS


def stop_plan(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The units to stop, each kind in its turn; the memory guards to give back ({tool, unit}); the added
    deployments' firewalls; and the slots stopped (None: the primary) and added slots among them."""
    records = list(records)
    slots = list(dict.fromkeys(r.get("slot") for r in records))
    return {
        "watchdogs": [r["watchdog_unit"] for r in records if r.get("watchdog_unit")],
        "watches": [r["watch_unit"] for r in records if r.get("watch_unit")],
        "leaders": [r["unit"] for r in records if r.get("role") == "leader"],
        "workers": [r["unit"] for r in records if r.get("role") == "worker"],
        "units": [r["unit"] for r in records],
        "memguards": [{"tool": r.get("tool") or TOOLS["serve"], "unit": r["unit"]} for r in records],
        "firewalls": [r["firewall_unit"] for r in records if r.get("slot") and r.get("firewall_unit")],
        "slots": slots,
        "added_slots": [s for s in slots if s],
    }


def routed_units(routes: Mapping[str, Any], slot: str | None) -> list[str]:
    """The units of the model the gateway routes for `slot`, in stopping order (the leader's own last)."""
    route = next((r for r in (routes.get("models") or {}).values() if r.get("slot") == slot), {})
    return list(reversed(route.get("units") or []))
