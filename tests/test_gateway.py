"""The gateway (sparkplay-serve gateway): one OpenAI endpoint in front of several deployments, routing by `model`.

The engines behind it here are stand-ins (small HTTP servers in this process that answer as an OpenAI server
does: a JSON reply, a server-sent-event stream they release step by step, an engine's own 400), so each test can
hold a stream open while the routes change, and record what reached them, so a smuggled or rewritten request
that got through would show. The attacks are the ones a local user tried on the first gateway (#39).
tests/test_several_lab.py runs the real one, installed by the serve role, on the lab.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkplay.nodetools.serve.gateway_main import in_thread


class Engine(BaseHTTPRequestHandler):
    """An OpenAI-shaped engine: answers as `name`; a stream waits on `release` between its events."""

    protocol_version = "HTTP/1.1"
    name = "engine"
    release: threading.Event
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        self._reply(200, b"{}")

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        self.seen.append(self.path)
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        body = json.loads(raw) if self.headers.get("Content-Type") == "application/json" else {}
        if body.get("max_tokens") == -1:
            reply = json.dumps({"error": {"message": "max_tokens must be at least 1", "type": "BadRequestError"}})
            self._reply(400, reply.encode())
        elif body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, event in enumerate([f"data: {json.dumps({'part': self.name})}\n\n", "data: [DONE]\n\n"]):
                if i:
                    assert self.release.wait(10)
                data = event.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            auth = self.headers.get("Authorization")
            self._reply(200, json.dumps({"served_by": self.name, "path": self.path, "auth": auth}).encode())

    def _reply(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def start(server: ThreadingHTTPServer) -> str:
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def engines() -> Iterator[dict[str, tuple[str, threading.Event, list[str]]]]:
    found, servers = {}, []
    for name in ("coder", "chat"):
        release, seen = threading.Event(), []
        server = ThreadingHTTPServer(
            ("127.0.0.1", 0), type(name, (Engine,), {"name": name, "release": release, "seen": seen})
        )
        servers.append(server)
        found[name] = (start(server), release, seen)
    yield found
    for server in servers:
        server.shutdown()


def write_routes(path: Path, routes: dict[str, str]) -> None:
    """As the serve role writes it: a new file renamed over the old (a reader never sees half of one)."""
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps({"models": {k: {"url": v, "recipe": f"r-{k}"} for k, v in routes.items()}}))
    staged.replace(path)
    stat = path.stat()  # a second write within the clock's grain must still read as a change
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def serve(routes: Path, *extra: str) -> tuple[int, object]:
    (_, port), stop = in_thread(
        [
            "--routes",
            str(routes),
            "--listen",
            "127.0.0.1:0",
            "--max-body",
            "4096",
            "--timeout",
            "10",
            "--grace",
            "0.2",
            *extra,
        ]
    )
    return port, stop


@pytest.fixture
def gateway(tmp_path, engines) -> Iterator[tuple[http.client.HTTPConnection, Path]]:
    routes = tmp_path / "routes.json"
    write_routes(routes, {"coder": engines["coder"][0], "chat": engines["chat"][0]})
    port, stop = serve(routes)
    yield http.client.HTTPConnection("127.0.0.1", port, timeout=10), routes
    stop()


def post(conn: http.client.HTTPConnection, body: dict, path: str = "/v1/chat/completions") -> tuple[int, dict]:
    conn.request(
        "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", "Authorization": "Bearer k"}
    )
    reply = conn.getresponse()
    return reply.status, json.loads(reply.read())


def open_stream(conn: http.client.HTTPConnection, model: str) -> http.client.HTTPResponse:
    """A streamed chat completion for MODEL, its reply open (read1 reads what has arrived)."""
    body = json.dumps({"model": model, "stream": True})
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    return conn.getresponse()


def test_requests_go_to_the_deployment_serving_their_model_and_the_list_has_every_one(gateway):
    conn, _ = gateway
    # the client's own Authorization is the gateway's business, never the engine's
    assert post(conn, {"model": "coder"}) == (200, {"served_by": "coder", "path": "/v1/chat/completions", "auth": None})
    assert post(conn, {"model": "chat"}, "/v1/embeddings")[1] == {
        "served_by": "chat",
        "path": "/v1/embeddings",
        "auth": None,
    }
    conn.request("GET", "/v1/models")
    listed = json.loads(conn.getresponse().read())
    assert [(m["id"], m["recipe"]) for m in listed["data"]] == [("chat", "r-chat"), ("coder", "r-coder")]


def test_an_unknown_model_an_engines_error_a_silent_engine_and_a_large_body_answer_as_openai_does(gateway, engines):
    conn, routes = gateway
    status, body = post(conn, {"model": "gpt-4"})
    assert (
        status == 404
        and body["error"]["code"] == "model_not_found"
        and "served here: chat, coder" in body["error"]["message"]
    )
    assert post(conn, {"model": "chat", "max_tokens": -1}) == (
        400,
        {"error": {"message": "max_tokens must be at least 1", "type": "BadRequestError"}},
    )  # the engine's own, passed through
    write_routes(routes, {"coder": "http://127.0.0.1:9", "chat": engines["chat"][0]})  # nothing listens on 9
    status, body = post(conn, {"model": "coder"})
    assert status == 502 and "'coder' does not answer" in body["error"]["message"]
    assert "127.0.0.1" not in json.dumps(body) and ":9" not in json.dumps(body)  # the upstream stays unsaid
    status, body = post(conn, {"model": "chat", "prompt": "x" * 5000})
    assert status == 413


def test_a_stream_is_passed_on_as_it_arrives_and_survives_the_routes_changing(gateway, engines):
    """The first event reaches the client before the engine sends the second; meanwhile a model is added and
    the streaming one removed from the routes: the open stream finishes, new requests follow the new routes."""
    conn, routes = gateway
    reply = open_stream(conn, "chat")
    assert reply.status == 200 and reply.getheader("Content-Type") == "text/event-stream"
    first = reply.read1(4096)
    assert b'"part": "chat"' in first and b"[DONE]" not in first  # the engine has not sent the rest yet
    write_routes(routes, {"coder": engines["coder"][0], "embedder": engines["coder"][0]})
    other = http.client.HTTPConnection(conn.host, conn.port, timeout=10)
    assert post(other, {"model": "embedder"})[1]["served_by"] == "coder"
    assert post(other, {"model": "chat"})[0] == 404
    engines["chat"][1].set()
    assert reply.read() == b"data: [DONE]\n\n"


def test_a_broken_routes_file_keeps_the_last_good_routes(gateway, engines):
    conn, routes = gateway
    routes.write_text("{not json")
    assert post(conn, {"model": "coder"})[0] == 200
    write_routes(routes, {"coder": "file:///etc/passwd"})
    assert post(conn, {"model": "coder"})[1]["served_by"] == "coder"  # refused route: the last good ones stay


class Slow(Engine):
    """An engine whose first byte takes `delay` seconds (a long prefill, or a hang)."""

    delay = 3.0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay)
        with contextlib.suppress(OSError):  # the gateway may have given up on it
            self._reply(200, json.dumps({"served_by": "slow"}).encode())


def test_each_deployment_has_its_own_first_byte_bound_and_the_rest_answer_504_with_the_cause(tmp_path, engines):
    """Only one silence bound (--timeout, 900 s) held every request: a hung engine kept clients for 15 minutes."""
    slow = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    url = start(slow)
    routes = tmp_path / "routes.json"
    table = {
        "hung": {"url": url, "recipe": "r-hung", "first_byte_s": 1},  # its bound: one second
        "patient": {"url": url, "recipe": "r-patient", "first_byte_s": 8},  # a long prefill fits
        "chat": {"url": engines["chat"][0], "recipe": "r-chat", "first_byte_s": 1},
    }
    routes.write_text(json.dumps({"models": table}))
    port, stop = serve(routes)
    try:
        began = time.monotonic()
        status, body = post(http.client.HTTPConnection("127.0.0.1", port, timeout=20), {"model": "hung"})
        took = time.monotonic() - began
        assert status == 504 and took < 2.5, (status, took)
        assert "gave no first byte within 1 s" in body["error"]["message"]
        assert body["error"]["code"] == "upstream_timeout"
        status, body = post(http.client.HTTPConnection("127.0.0.1", port, timeout=20), {"model": "patient"})
        assert (status, body) == (200, {"served_by": "slow"})  # 3 s within its 8
        status, _ = post(http.client.HTTPConnection("127.0.0.1", port, timeout=20), {"model": "chat"})
        assert status == 200  # a quick engine under a short bound answers as ever
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        assert 'sparkplay_gateway_requests_total{code="504",model="hung"} 1.0' in conn.getresponse().read().decode()
    finally:
        stop()
        slow.shutdown()


@pytest.mark.parametrize("bad", [0, -1, "60", True, 10**6])
def test_a_routes_file_with_a_bad_first_byte_bound_keeps_the_routes_before(tmp_path, bad):
    from sparkplay.nodetools.serve.gateway_files import Routes

    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"models": {"m": {"url": "http://127.0.0.1:1", "first_byte_s": bad}}}))
    with pytest.raises(ValueError, match="first_byte_s"):
        Routes(path).parse(path.read_bytes())


def test_the_gateways_upstream_connections_acknowledge_each_arrival_at_once() -> None:
    """An engine writing headers and body in two sends (http.server, as these tests' engines do) waits for the
    headers' acknowledgement, which Linux delays up to 40 ms on a pooled connection; the gateway's
    connections ask for it at once on every read (gateway_tcp; the delay itself: benchmarks/gateway.py)."""
    import asyncio
    import socket

    from sparkplay.nodetools.serve import gateway_tcp

    calls: list[tuple[int, int, int]] = []

    class Sock:
        family = socket.AF_INET

        def setsockopt(self, level: int, name: int, value: int) -> None:
            calls.append((level, name, value))

    class Transport(asyncio.Transport):
        def get_extra_info(self, name: str, default: object = None) -> object:
            return Sock() if name == "socket" else default

    async def made() -> object:
        connector = gateway_tcp.connector(limit=0)
        try:
            protocol = connector._factory()
            protocol.connection_made(Transport())
            protocol.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
            protocol.data_received(b"{}")
            return protocol
        finally:
            await connector.close()

    asyncio.run(made())
    assert [c for c in calls if c[1] == socket.TCP_QUICKACK] == [(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)] * 2


def test_the_gateway_pools_its_upstream_connections_through_the_quick_acknowledging_connector(gateway) -> None:
    from sparkplay.nodetools.serve import gateway_tcp

    conn, _ = gateway
    for _ in range(3):
        assert post(conn, {"model": "coder", "messages": []})[0] == 200
    source = Path(gateway_tcp.__file__).with_name("gateway.py").read_text()
    assert "gateway_tcp.connector(" in source and "aiohttp.TCPConnector(" not in source


class ClosesKeptAlive(Engine):
    """An engine whose idle timeout closes a kept-alive connection just as the client sends on it again: the
    first request on each connection is answered (kept alive), the second read on it is met by a close."""

    connections: list[int]

    def handle(self) -> None:
        self.connections.append(1)
        self.handle_one_request()  # answered, the connection kept alive
        self.rfile.peek(1)  # the next request arrives (or the client closes the connection)...
        self.close_connection = True  # ...and is met by a close, no byte answered


def test_an_engine_closing_a_kept_alive_connection_under_a_request_is_asked_again_on_a_new_one(tmp_path):
    """The hour's soak saw four 502s outside its faults, each `ServerDisconnectedError` in the gateway's journal:
    the gateway kept idle connections 30 s, the engines 5 s. Here every reuse of a connection meets a close."""
    connections: list[int] = []
    handler = type("closes", (ClosesKeptAlive,), {"name": "chat", "release": threading.Event(), "seen": []})
    handler.connections = connections
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    routes = tmp_path / "routes.json"
    write_routes(routes, {"chat": start(server)})
    port, stop = serve(routes)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(4):
            assert post(conn, {"model": "chat"}) == (
                200,
                {"served_by": "chat", "path": "/v1/chat/completions", "auth": None},
            )
        assert len(connections) >= 4  # every request after the first met a closed connection, then a new one
    finally:
        stop()
        server.shutdown()
