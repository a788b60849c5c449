"""Models served on demand behind the gateway: started when a request names one, stopped when idle past their
TTL, and stopped least recently used first when one asked for does not fit beside those running.

What fits is the admission rule's, written into the routes file by the serve role: each on-demand model's
claim (bytes, on its node) and each node's budget for on-demand models (what admission leaves beside the
always-on deployments, or the inventory's serve_on_demand_budget_gib). A model with requests in flight is
never stopped, nor is an always-on one. Starting and stopping units needs root: the gateway asks the swapper
(swapper.py, a root unit of its own that acts only on models the routes file marks on demand) over a unix
socket. Requests for a model that is loading wait, each at most `wait_s`, then get a 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from . import gateway_events

DEFAULT_TTL_S, DEFAULT_WAIT_S = 600.0, 120.0  # the routes file's ttl_s and wait_s where it has none


class Unavailable(Exception):
    """The model cannot answer now: a 503 with Retry-After (the message says why)."""

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Model:
    state: str = ""  # "" until first looked at
    in_flight: int = 0
    waiting: int = 0
    last_used: float = field(default_factory=time.monotonic)
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # set when a load ends, either way
    # its last start's receipt (receipt.py's keys, counted from when the gateway asked for it); the first
    # byte of the first answer after it is its first token
    receipt: dict[str, Any] | None = None
    asked: float = 0.0


async def _port_open(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port or 80), 0.5)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


def _journal(line: str) -> None:
    gateway_events.say(line)


class Demand:
    def __init__(self, swapper: str | None, session: Any, metrics: Any) -> None:
        """`session`: the gateway's aiohttp client session (set once its loop runs)."""
        self.swapper, self.session, self.metrics = swapper, session, metrics
        self.models: dict[str, Model] = {}
        self.lock = asyncio.Lock()  # one decision at a time about what runs: two loads never count the same room

    def idle_seconds(self) -> dict[str, float]:
        """Each model's seconds since its last request ended (0 while one is in flight): the page's TTL."""
        now = time.monotonic()
        return {name: 0.0 if m.in_flight else now - m.last_used for name, m in self.models.items()}

    def snapshot(self, table: dict[str, Any]) -> dict[str, dict[str, Any]]:
        out = {}
        for name, route in table["models"].items():
            model = self.models.get(name) or Model()
            state = model.state or ("serving" if not route.get("on_demand") else "unknown")
            out[name] = {
                "state": state,
                "on_demand": bool(route.get("on_demand")),
                "in_flight": model.in_flight,
                "waiting": model.waiting,
                "receipt": model.receipt,
            }
        return out

    async def acquire(self, name: str, route: dict[str, Any], table: dict[str, Any]) -> None:
        """Hold the model for one request: started first when it is stopped; Unavailable when it cannot be."""
        model = self.models.setdefault(name, Model())
        if not route.get("on_demand"):
            model.in_flight += 1
            model.last_used = time.monotonic()
            return
        deadline = time.monotonic() + float(table.get("wait_s") or DEFAULT_WAIT_S)
        model.waiting += 1
        self.metrics.queue(name, model.waiting)
        try:
            await self._ready(name, model, route, table, deadline)
        finally:
            model.waiting -= 1
            self.metrics.queue(name, model.waiting)
        model.in_flight += 1
        model.last_used = time.monotonic()

    def release(self, name: str, broken: bool = False) -> None:
        model = self.models.get(name)
        if model is not None:
            model.in_flight = max(0, model.in_flight - 1)
            model.last_used = time.monotonic()
            if broken and model.state == "serving":  # its engine went away (stopped by hand, crashed)
                model.state = "stopped on demand"

    async def _ready(
        self, name: str, model: Model, route: dict[str, Any], table: dict[str, Any], deadline: float
    ) -> None:
        if not model.state:
            model.state = "serving" if await self._healthy(route, 1.0) else "stopped on demand"
        while model.state != "serving":
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable(f"model {name!r} is still loading; try again", 10)
            if model.state == "loading":
                try:
                    await asyncio.wait_for(model.ready.wait(), left)
                except TimeoutError:
                    raise Unavailable(f"model {name!r} is still loading; try again", 10) from None
                continue
            async with self.lock:
                if model.state != "stopped on demand":
                    continue
                await self.learn(table, route.get("host"), but=name, again=True)
                victims = self._room(name, route, table)
                if victims is not None:
                    for victim in victims:
                        await self._stop(victim, f"evicted (least recently used) to make room for {name}")
                        self.metrics.evicted(victim)
                    model.state, model.ready = "loading", asyncio.Event()
            if victims is None:  # what would have to stop has requests in flight: wait for them
                await asyncio.sleep(min(0.5, max(left, 0)))
                if time.monotonic() >= deadline:
                    _journal(f"refused {name}: it does not fit beside the models answering requests on its node")
                    raise Unavailable(
                        f"model {name!r} does not fit beside the models answering requests now; try again", 15
                    )
                continue
            await self._start(name, model, route, deadline)

    async def learn(
        self, table: dict[str, Any], host: object = None, but: str | None = None, again: bool = False
    ) -> None:
        """Learn whether the models on demand this gateway has not seen yet run (on `host`, or any node): a
        gateway that restarted (killed, or its node rebooted) knows none of them, and one it does not know of
        still holds its room, so the swapper would refuse a start past the budget (the soak found it: 503s
        until each was asked for). `again`: those taken for stopped are looked at anew too (one may have been
        started by hand since). Asked before making room only: a guess made earlier goes stale (a model an
        `up` proves runs for a moment, then is stopped)."""
        for other, beside in table["models"].items():
            seen = self.models.setdefault(other, Model())
            if (
                other == but
                or not beside.get("on_demand")
                or seen.state not in ("", *(("stopped on demand",) if again else ()))
            ):
                continue
            if host is None or beside.get("host") == host:
                running = await self._healthy(beside, 1.0)
                if seen.state in ("", "stopped on demand"):  # nothing decided about it meanwhile
                    seen.state = "serving" if running else "stopped on demand"

    def _room(self, name: str, route: dict[str, Any], table: dict[str, Any]) -> list[str] | None:
        """The on-demand models to stop (least recently used first) so `name` fits on its node; None when
        only models with requests in flight could make room."""
        budget = (table.get("budgets") or {}).get(route.get("host"))
        claim = int(route.get("claim") or 0)
        if budget is None:
            return []
        if claim > budget:
            _journal(f"refused {name}: it claims {claim} bytes, over the {budget} its node keeps for models on demand")
            raise Unavailable(
                f"model {name!r} claims {claim / 2**30:.1f} GiB, more than the "
                f"{budget / 2**30:.1f} GiB its node keeps for models on demand",
                3600,
            )
        running = {
            n: r
            for n, r in table["models"].items()
            if r.get("on_demand")
            and r.get("host") == route.get("host")
            and n != name
            and self.models.get(n, Model()).state in ("serving", "loading")
        }
        used = sum(int(r.get("claim") or 0) for r in running.values())
        idle = sorted(
            (
                n
                for n in running
                if self.models[n].state == "serving" and not self.models[n].in_flight and not self.models[n].waiting
            ),
            key=lambda n: self.models[n].last_used,
        )
        victims: list[str] = []
        for victim in idle:
            if used + claim <= budget:
                break
            victims.append(victim)
            used -= int(running[victim].get("claim") or 0)
        return victims if used + claim <= budget else None

    def answered(self, name: str, first_byte_at: float) -> None:
        """The first byte of an answer of `name` arrived (time.monotonic): the first after a start is its
        receipt's first token."""
        model = self.models.get(name)
        if model is not None and model.receipt is not None and model.receipt.get("first_token_s") is None:
            model.receipt["first_token_s"] = round(first_byte_at - model.asked, 3)

    async def _start(self, name: str, model: Model, route: dict[str, Any], deadline: float) -> None:
        started = time.monotonic()
        _journal(f"starting {name} on demand")
        seen: dict[str, float] = {}
        try:
            await self._swap("start", name)
            while not await self._healthy(route, 1.0):
                if "port_open_s" not in seen and await _port_open(route["url"]):
                    seen["port_open_s"] = time.monotonic()
                if time.monotonic() >= deadline:
                    raise Unavailable(f"model {name!r} is still loading; try again", 10)
                await asyncio.sleep(0.2)
        except Unavailable:
            model.state = "loading" if time.monotonic() >= deadline else "stopped on demand"
            if model.state == "loading":  # it goes on loading: the next request finds it
                asyncio.get_running_loop().create_task(self._finish_loading(name, model, route))
            else:
                model.ready.set()
            raise
        took = time.monotonic() - started
        healthy = time.monotonic()
        model.asked, model.receipt = (
            started,
            {
                "since": "asked for",
                "port_open_s": round(seen.get("port_open_s", healthy) - started, 3),
                "http_ready_s": round(healthy - started, 3),
                "first_token_s": None,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        )
        model.state, model.last_used = "serving", time.monotonic()
        model.ready.set()
        self.metrics.loaded(name, took)
        _journal(f"{name} answers, {took:.1f} s after it was asked for")

    async def _finish_loading(self, name: str, model: Model, route: dict[str, Any]) -> None:
        for _ in range(3000):
            if await self._healthy(route, 1.0):
                model.state, model.last_used = "serving", time.monotonic()
                break
            await asyncio.sleep(0.2)
        else:
            model.state = "stopped on demand"
            _journal(f"{name} did not come up on demand (its unit's journal says why)")
        model.ready.set()

    async def _stop(self, name: str, why: str) -> None:
        _journal(f"stopping {name}: {why}")
        await self._swap("stop", name)
        self.models[name].state = "stopped on demand"

    async def reap(self, table: dict[str, Any]) -> None:
        """Stop each on-demand model idle past the TTL (none with requests in flight or waiting)."""
        now, ttl = time.monotonic(), float(table.get("ttl_s") or DEFAULT_TTL_S)
        for name, route in table["models"].items():
            model = self.models.get(name)
            if (
                route.get("on_demand")
                and model is not None
                and model.state == "serving"
                and not model.in_flight
                and not model.waiting
                and now - model.last_used > ttl
            ):
                async with self.lock:
                    if model.state == "serving" and not model.in_flight and not model.waiting:
                        try:
                            await self._stop(name, f"idle for {ttl:g} s (its TTL)")
                            self.metrics.expired(name)
                        except Unavailable as exc:
                            _journal(f"could not stop {name}: {exc}")

    async def _healthy(self, route: dict[str, Any], timeout: float) -> bool:
        import aiohttp

        try:
            async with self.session.get(route["url"] + "/health", timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                return r.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def _swap(self, op: str, name: str) -> None:
        if self.swapper is None:
            raise Unavailable(f"model {name!r} is served on demand but this gateway has no swapper", 60)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(self.swapper), 5)
            writer.write(json.dumps({"op": op, "model": name}).encode() + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 300)
            writer.close()
            said = json.loads(line or b"{}")
        except (OSError, TimeoutError, ValueError) as exc:
            _journal(f"the swapper did not {op} {name}: {type(exc).__name__}: {exc}")
            raise Unavailable(f"model {name!r} could not be {op}ed now (the gateway's journal says why)", 30) from None
        if not said.get("ok"):
            _journal(f"the swapper did not {op} {name}: {said.get('error')}")
            raise Unavailable(f"model {name!r} could not be {op}ed now (the gateway's journal says why)", 30)
