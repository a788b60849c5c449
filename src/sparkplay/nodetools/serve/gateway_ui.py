"""The cluster page: GET /ui (the page), /ui/FILE (its script and the charting library it vendors, ui/VENDORED.md)
and /ui/state (what the page shows, as JSON; the page asks for it every second).

Everything comes from what the gateway already knows on the leader, as the user it runs as (no root): each
deployment's route (recipe, node, on demand or not), its state now (serving, loading, stopped on demand, and
the time left to its TTL), why it cannot answer (the same words `status` and the 503 use: its watchdog's state,
a cable address without a route), its last start's receipt, its requests, errors, latency and first byte from
the gateway's own metrics (p50 and p95 of each five seconds, the last fifteen minutes), each node's memory as
admission counted it and the leader's live (gateway_nodes.py), and the gateway's own events (starts, swaps and
evictions, TTL stops, causes) with their times.
The page is behind the gateway's keys when it has some, and binds where the API binds.
"""

from __future__ import annotations

import time
from collections import deque
from importlib import resources
from typing import Any

from . import gateway_events, gateway_nodes
from .gateway_demand import DEFAULT_TTL_S

FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
}
# the page may run only its own files: no script, style, image or connection from anywhere else
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
EVERY_S = 5.0
KEPT = 180  # fifteen minutes of five-second points


def asset(name: str) -> tuple[bytes, str] | None:
    """A file of the page by its name (only the page's own: no path reaches the disk)."""
    if name not in FILES:
        return None
    return resources.files(__package__).joinpath("ui", name).read_bytes(), FILES[name]


def _quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile of a histogram's (upper bound, cumulative count) pairs: the first bound holding it."""
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    for bound, count in buckets:
        if count >= q * total:
            return bound if bound != float("inf") else None
    return None


def _figures(registry: Any) -> dict[str, dict[str, Any]]:
    """model -> cumulative {requests, errors, latency buckets, first-byte buckets} from the gateway's metrics."""
    found: dict[str, dict[str, Any]] = {}
    for family in registry.collect() if registry is not None else ():
        for sample in family.samples:
            model = sample.labels.get("model")
            if model is None:
                continue
            row = found.setdefault(model, {"requests": 0.0, "errors": 0.0, "latency": {}, "first_byte": {}})
            if sample.name == "sparkplay_gateway_requests_total":
                row["requests"] += sample.value
                row["errors"] += sample.value if not str(sample.labels.get("code", "")).startswith("2") else 0
            elif sample.name == "sparkplay_gateway_request_seconds_bucket":
                row["latency"][float(sample.labels["le"])] = sample.value
            elif sample.name == "sparkplay_gateway_first_byte_seconds_bucket":
                row["first_byte"][float(sample.labels["le"])] = sample.value
    return found


class History:
    """Each model's requests, errors and p50/p95 of latency and first byte, per five seconds."""

    def __init__(self) -> None:
        self.points: dict[str, deque[dict[str, Any]]] = {}
        self.before: dict[str, dict[str, Any]] = {}
        self.taken = 0.0

    def sample(self, registry: Any, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if now - self.taken < EVERY_S:
            return
        self.taken = now
        for model, row in _figures(registry).items():
            was = self.before.get(model, {"requests": 0.0, "errors": 0.0, "latency": {}, "first_byte": {}})
            point: dict[str, Any] = {
                "t": round(now, 1),
                "requests": row["requests"] - was["requests"],
                "errors": row["errors"] - was["errors"],
            }
            for key in ("latency", "first_byte"):
                delta = sorted((b, c - was[key].get(b, 0.0)) for b, c in row[key].items())
                point[f"{key}_p50"] = _quantile(delta, 0.5)
                point[f"{key}_p95"] = _quantile(delta, 0.95)
            self.points.setdefault(model, deque(maxlen=KEPT)).append(point)
            self.before[model] = row

    def of(self, model: str) -> list[dict[str, Any]]:
        return list(self.points.get(model, ()))


def state(
    gateway: Any, table: dict[str, Any], live: dict[str, Any] | None = None, now: float | None = None
) -> dict[str, Any]:
    """What the page shows, as data (GET /ui/state); `live`: gateway_nodes.live() of the gateway's node."""
    live = live or {}
    now = time.time() if now is None else now
    snapshot = gateway.demand.snapshot(table)
    idle_s = gateway.demand.idle_seconds()
    ttl = float(table.get("ttl_s") or DEFAULT_TTL_S)
    models = []
    for name, route in sorted(table["models"].items()):
        seen = snapshot.get(name, {})
        on_demand = bool(route.get("on_demand"))
        serving = seen.get("state") == "serving"
        left = round(max(0.0, ttl - idle_s[name])) if on_demand and serving and name in idle_s else None
        models.append(
            {
                "name": name,
                "recipe": route.get("recipe"),
                "node": route.get("host"),
                "on_demand": on_demand,
                "state": seen.get("state", "unknown"),
                "cause": gateway.watch.causes.get(name),
                "in_flight": seen.get("in_flight", 0),
                "waiting": seen.get("waiting", 0),
                "ttl_left_s": left,
                "receipt": seen.get("receipt"),
                "history": gateway.history.of(name),
            }
        )
    return {
        "at": round(now, 1),
        "node": {"name": gateway.watch.node, "memory": live.get("memory"), "twins": live.get("twins", [])},
        "nodes": gateway_nodes.nodes(table, {m["name"]: m["state"] for m in models}, gateway.watch.node, live),
        "default": table.get("default"),
        "models": models,
        "events": gateway_events.recent(),
    }
