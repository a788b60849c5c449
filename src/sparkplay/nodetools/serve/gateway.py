"""One OpenAI-compatible endpoint in front of every deployment of the cluster, routing by the request's `model`.

Why sparkplay's own routing and not LiteLLM's proxy (docs/serving.md "The gateway" has the measurements):
LiteLLM adds or removes a model without a restart only with a PostgreSQL database behind it, and its proxy
registers 90 routes (keys, users, prompts, MCP) whose advisories include SQL injection in the key check. What
is needed here is narrow: route, list, stream, pass errors through, follow a routes file. The HTTP itself is
aiohttp's (its parser refuses the framing tricks: Transfer-Encoding beside Content-Length, two lengths, digits
that are not ASCII), run from a virtualenv of pinned, hashed packages (roles/serve/files/gateway.lock).

Bounded everywhere: at most `max_connections` connections (503 above; asyncio holds an idle one for the cost
of its socket), a request's headers within `idle_timeout` of the connection's start or last answer, its body
within `body_timeout` and `max_body` bytes, all bodies held at once within `body_budget`, `model` read
without building the body (gateway_body.py), only a plain /v1/... path forwarded. An upstream's address and
error reach the journal, never the client. The routes file is re-read when it changes (gateway_files.py): a
request already forwarded keeps its upstream, so adding or stopping one model never touches another's.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from . import gateway_events, gateway_metrics, gateway_nodes, gateway_tcp, gateway_ui
from .gateway_body import BadBody, forwarded_path, model_of, model_of_form
from .gateway_demand import Demand, Unavailable
from .gateway_files import Keys, Routes, UpstreamKeys
from .gateway_watch import Watch, unreachable

# a body larger than this has its `model` found on a thread of its own (gateway_body.SCAN_BUDGET_S bounds it)
OFF_LOOP_BYTES = 256 << 10
# what a client may send through (hop-by-hop headers, the host and its key are the gateway's own)
FORWARDED = ("content-type", "accept", "x-request-id")
PASSED_BACK = ("content-type", "x-request-id", "cache-control", "content-encoding")
# an idle connection to an engine is kept less long than any engine keeps it (llama.cpp's server and vLLM's and
# SGLang's uvicorn close one idle for 5 s): one kept longer is one the engine may close as a request is sent on it
UPSTREAM_KEEPALIVE_S = 2.0


def _error(status: int, message: str, kind: str, code: str, **headers: str) -> Any:
    from aiohttp import web

    body = json.dumps({"error": {"message": message, "type": kind, "code": code}})
    return web.Response(status=status, text=body, content_type="application/json", headers=headers)


def _journal(line: str) -> None:
    gateway_events.say(line)


class Gateway:
    def __init__(
        self,
        routes: Routes,
        keys: Keys | None,
        upstream_keys: UpstreamKeys,
        *,
        max_body: int,
        body_budget: int,
        body_timeout: float,
        timeout_s: float,
        node: str | None = None,
    ) -> None:
        self.routes, self.keys, self.upstream_keys = routes, keys, upstream_keys
        self.max_body, self.body_budget, self.body_timeout, self.timeout_s = (
            max_body,
            body_budget,
            body_timeout,
            timeout_s,
        )
        self.held = 0  # body bytes held by requests in flight
        self.upstreams: dict[str, int] = {}  # each API's requests in flight (a drain waits for 0)
        self.session: Any = None
        self.metrics = gateway_metrics.make()
        self.demand = Demand(None, None, self.metrics)
        self.history = gateway_ui.History()  # the cluster page's charts
        self.fabric_env: Path | None = None  # the cluster page's twins (--fabric-env)
        # which deployments cannot answer now and why (gateway_watch.py); the requests in flight for each, and
        # those ended with the cause (their task cancelled: the cause is their answer)
        self.watch = Watch(node)
        self.inflight: dict[str, set[asyncio.Task[Any]]] = {}
        self.abandoned: dict[asyncio.Task[Any], str] = {}

    async def start(self) -> None:
        import aiohttp

        connector = gateway_tcp.connector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_S, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.timeout_s)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )
        self.demand.session = self.session

    async def tend(self, state_file: Path | None) -> None:
        """Every second: stop the on-demand models idle past their TTL, and keep the state file (what status
        shows of each model) current."""
        said = b""
        while True:
            table = self.routes.current()
            self.look(table)
            await self.demand.reap(table)
            self.history.sample(getattr(self.metrics, "registry", None))
            if state_file is not None:
                now = json.dumps(
                    {
                        "models": self.demand.snapshot(table),
                        "default": self._default(table),
                        "routes": {n: r["url"] for n, r in table["models"].items()},
                        "upstreams": self.upstreams,
                    }
                ).encode()
                if now != said:
                    staged = state_file.with_suffix(".new")
                    staged.write_bytes(now)
                    staged.replace(state_file)
                    said = now
            await asyncio.sleep(1)

    def look(self, table: dict[str, Any]) -> None:
        """A deployment that became unable to answer: said in the journal, and its requests in flight ended
        with the cause (their clients get it now instead of waiting for an answer that is not coming)."""
        for name, cause in self.watch.look(table).items():
            waiting = [t for t in self.inflight.get(name, ()) if not t.done()]
            _journal(f"{cause}; ending {len(waiting)} request(s) in flight, refusing new ones until it can")
            for task in waiting:
                self.abandoned[task] = cause
                task.cancel()

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def handle(self, request: Any) -> Any:
        if self.keys is not None and not self.keys.admits(request.headers.get("Authorization")):
            return _error(
                401,
                "this gateway needs `Authorization: Bearer KEY` with one of its keys",
                "invalid_request_error",
                "invalid_api_key",
                **{"WWW-Authenticate": "Bearer"},
            )
        path = forwarded_path(request.raw_path)
        if request.method == "GET":
            return await self._get(request.raw_path)
        if request.method != "POST":
            return _error(405, f"{request.method} is not served here", "invalid_request_error", "method_not_allowed")
        if path is None:
            return _error(
                400,
                "only POST /v1/... (a plain path: no dot segments, escapes or query) is forwarded",
                "invalid_request_error",
                "bad_request",
            )
        length = request.content_length
        if length is None:
            return _error(411, "a POST needs a Content-Length", "invalid_request_error", "length_required")
        if length > self.max_body:
            return _error(413, f"the body is over {self.max_body} bytes", "invalid_request_error", "too_large")
        if self.held + length > self.body_budget:
            return _error(
                503,
                "the gateway holds as many request bodies as it may; try again",
                "api_error",
                "overloaded",
                **{"Retry-After": "1"},
            )
        self.held += length
        try:
            return await self._post(request, path, length)
        finally:
            self.held -= length

    async def _get(self, raw: str) -> Any:
        from aiohttp import web

        table = self.routes.current()
        models = table["models"]
        if raw == "/health":
            return web.json_response(
                {"status": "ok", "models": self.demand.snapshot(table), "default": self._default(table)}
            )
        if raw == "/metrics":
            data, kind = self.metrics.text()
            return web.Response(body=data, headers={"Content-Type": kind})
        if raw == "/ui/state":
            units = gateway_nodes.local_units(table, self.watch.node)
            live = await asyncio.to_thread(gateway_nodes.live, units, self.fabric_env)  # file reads, systemctl
            return web.json_response(gateway_ui.state(self, table, live), headers={"Cache-Control": "no-store"})
        if raw in ("/ui", "/ui/") or raw.startswith("/ui/"):
            found = gateway_ui.asset(raw.removeprefix("/ui").strip("/") or "index.html")
            if found is not None:
                return web.Response(body=found[0], headers={"Content-Type": found[1], **gateway_ui.PAGE_HEADERS})
        if raw == "/v1/models":
            data = [
                {"id": name, "object": "model", "owned_by": "sparkplay", "recipe": route["recipe"]}
                for name, route in sorted(models.items())
            ]
            return web.json_response({"object": "list", "data": data})
        name = raw.removeprefix("/v1/models/")
        if raw.startswith("/v1/models/") and name in models:
            return web.json_response({"id": name, "object": "model", "owned_by": "sparkplay"})
        return _error(
            404,
            "no such route (GET serves /health, /metrics, /v1/models, /v1/models/NAME, /ui, /ui/state)",
            "invalid_request_error",
            "not_found",
        )

    @staticmethod
    def _default(table: dict[str, Any]) -> str | None:
        default = table["default"]
        return default if default in table["models"] else None

    async def _post(self, request: Any, path: str, length: int) -> Any:
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await request.content.readexactly(length)
        except (TimeoutError, asyncio.IncompleteReadError):
            return _error(
                408, f"the body did not arrive within {self.body_timeout:g} s", "invalid_request_error", "timeout"
            )
        kind = request.headers.get("Content-Type", "")
        try:
            if kind.lower().startswith("multipart/"):
                model = model_of_form(body, kind)
            elif len(body) > OFF_LOOP_BYTES:  # off the loop: other requests go on while it is walked
                model = await asyncio.to_thread(model_of, body)
            else:
                model = model_of(body)
        except BadBody as exc:
            return _error(
                400, f"the body is not a request the gateway can route: {exc}", "invalid_request_error", "bad_request"
            )
        table = self.routes.current()
        models = table["models"]
        name = model if model is not None else self._default(table)
        if name is None or name not in models:
            served = ", ".join(sorted(models)) or "none"
            said = "names no model and no default is set" if model is None else f"asks for {model!r}"
            return _error(404, f"the request {said}; served here: {served}", "invalid_request_error", "model_not_found")
        started = time.monotonic()
        url = models[name]["url"]
        # counted from the moment the route is chosen: a deployment whose route moved stops once this is 0
        self.upstreams[url] = self.upstreams.get(url, 0) + 1
        try:
            return await self._held(request, models[name], name, path, body, table, started)
        finally:
            self.upstreams[url] -= 1
            if not self.upstreams[url]:
                del self.upstreams[url]

    async def _held(
        self,
        request: Any,
        route: dict[str, Any],
        name: str,
        path: str,
        body: bytes,
        table: dict[str, Any],
        started: float,
    ) -> Any:
        cause = self.watch.causes.get(name)
        if cause:  # known now: answered at once, with the cause
            return self._unavailable(name, cause, started)
        try:
            await self.demand.acquire(name, route, table)
        except Unavailable as exc:
            self.metrics.answered(name, 503, time.monotonic() - started, time.monotonic() - started)
            return _error(503, str(exc), "api_error", "model_unavailable", **{"Retry-After": str(exc.retry_after)})
        broken = True
        task = asyncio.current_task()  # a handler always runs in a task of its own
        self.inflight.setdefault(name, set()).add(task)  # type: ignore[arg-type]
        try:
            reply, broken = await self._forward(request, route, name, path, body, started)
            return reply
        except asyncio.CancelledError:
            said = self.abandoned.pop(task, None)  # type: ignore[arg-type]
            if said is None:  # not ours: the server's own (a stop, a client gone)
                raise
            task.uncancel()  # type: ignore[union-attr]
            return self._unavailable(name, said, started)
        finally:
            self.inflight[name].discard(task)  # type: ignore[arg-type]
            if not self.inflight[name]:
                del self.inflight[name]
            self.abandoned.pop(task, None)  # type: ignore[arg-type]
            self.demand.release(name, broken)

    def _unavailable(self, name: str, cause: str, started: float) -> Any:
        took = time.monotonic() - started
        self.metrics.answered(name, 503, took, took)
        return _error(503, cause, "api_error", "model_unavailable", **{"Retry-After": "10"})

    def _unreachable(self, name: str, route: dict[str, Any], exc: BaseException, started: float) -> Any:
        """The answer for an engine the gateway could not reach: 503 with the cause where it is known (a cable
        address with its twin down: there is no way there now), else 502."""
        _journal(f"model {name} (recipe {route['recipe']}) at {route['url']}: {type(exc).__name__}: {exc}")
        if unreachable(exc):
            where = f"its node {route.get('host')}" if route.get("host") else "its node"
            cause = f"model {name!r} cannot answer now: no route to {where} (the cable or its twin is down)"
            return self._unavailable(name, cause, started)
        self.metrics.answered(name, 502, time.monotonic() - started, time.monotonic() - started)
        return _error(
            502,
            f"model {name!r} does not answer now (the gateway's journal says why)",
            "api_error",
            "upstream_unavailable",
            **{"Retry-After": "5"},
        )

    async def _send(self, url: str, body: bytes, headers: dict[str, str]) -> Any:
        """POST to the engine; once more when the engine closed the kept-alive connection under the request
        (it answered nothing: its idle timeout racing the reuse). Inference has no side effect a second send
        could double; an engine that went away fails the second send too, and that failure is the answer."""
        import aiohttp

        try:
            return await self.session.request("POST", url, data=body, headers=headers)
        except aiohttp.ServerDisconnectedError:
            return await self.session.request("POST", url, data=body, headers=headers)

    async def _forward(
        self, request: Any, route: dict[str, Any], name: str, path: str, body: bytes, started: float
    ) -> tuple[Any, bool]:
        """The engine's answer passed on, and whether the engine could not be reached."""
        import aiohttp
        from aiohttp import web

        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        key = self.upstream_keys.of(route["slot"])
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        bound = route.get("first_byte_s") or self.timeout_s
        sent = time.monotonic()
        try:
            async with asyncio.timeout(bound):  # its first byte (the answer's headers) within its own bound
                upstream = await self._send(route["url"] + path, body, headers)
        except TimeoutError as exc:
            if time.monotonic() - sent < bound:  # aiohttp's own (the connect's): not the first-byte bound
                return self._unreachable(name, route, exc, started), True
            _journal(f"model {name} (recipe {route['recipe']}) gave no first byte within {bound:g} s")
            self.metrics.answered(name, 504, time.monotonic() - started, time.monotonic() - started)
            return _error(
                504,
                f"model {name!r} gave no first byte within {bound:g} s (its first-byte bound, "
                "serve_first_byte_timeout): a prefill longer than that, or an engine that hangs",
                "api_error",
                "upstream_timeout",
            ), True
        except (aiohttp.ClientError, OSError) as exc:
            return self._unreachable(name, route, exc, started), True
        first_byte = time.monotonic() - started
        async with upstream:
            passed = {k: v for k, v in upstream.headers.items() if k.lower() in PASSED_BACK}
            if upstream.content_length is not None and upstream.content_length <= 1 << 20:
                try:
                    data = await upstream.read()
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    _journal(f"model {name} at {route['url']} broke off its answer: {type(exc).__name__}")
                    return _error(502, f"model {name!r} broke off its answer", "api_error", "upstream_broke_off"), True
                self.metrics.answered(name, upstream.status, first_byte, time.monotonic() - started)
                self.demand.answered(name, time.monotonic())  # a start's receipt: its first answer
                return web.Response(status=upstream.status, body=data, headers=passed), False
            reply = web.StreamResponse(status=upstream.status, headers=passed)
            if upstream.content_length is not None:
                reply.content_length = upstream.content_length
            else:
                reply.enable_chunked_encoding()
            await reply.prepare(request)
            try:
                async for piece in upstream.content.iter_any():  # each piece passed on as it arrives
                    self.demand.answered(name, time.monotonic())  # a start's receipt: its first token
                    await reply.write(piece)
                await reply.write_eof()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                said = self.abandoned.pop(task, None) if task is not None else None
                if said is None:
                    raise
                task.uncancel()  # type: ignore[union-attr]
                # the answer had begun: its end is all that can be said (the journal has the cause)
                _journal(f"a stream of model {name} ended: {said}")
                request.transport and request.transport.close()
            except (aiohttp.ClientError, OSError, TimeoutError, ConnectionError) as exc:
                # the client went away, or the upstream broke off: nothing more can be said to either
                _journal(f"a stream of model {name} ended early: {type(exc).__name__}")
                request.transport and request.transport.close()
            self.metrics.answered(name, upstream.status, first_byte, time.monotonic() - started)
            return reply, False
