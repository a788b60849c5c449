"""The gateway fails fast with the cause (issue 53): a deployment its watchdog says cannot answer now (waiting
for a peer, a cable or a node; restarting; stood down) is refused at once with 503, Retry-After and the cause
in OpenAI's error shape, and the requests already in flight for it end with the same answer instead of
hanging; a connection that finds no route to its node says so. Stand-in engines in this process (as in
tests/test_gateway.py); tests/test_several_lab.py pulls the real cable under the real gateway."""

from __future__ import annotations

import errno
import http.client
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp
import pytest

from sparkplay.nodetools.serve.gateway_watch import STALE_S, Watch, cause_of, routed, unreachable
from tests.test_gateway import serve, start


class Silent(BaseHTTPRequestHandler):
    """An engine whose group lost a rank: it takes the request and says nothing until released."""

    protocol_version = "HTTP/1.1"
    release = threading.Event()

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.release.wait(30)
        data = b'{"choices": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def state(path: Path, status: str, why: str | None = None, updated: float | None = None, **extra: object) -> None:
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps({"status": status, "why": why, "updated": updated or time.time(), **extra}))
    staged.replace(path)


@pytest.fixture
def silent_gateway(tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("S", (Silent,), {"release": threading.Event()}))
    url = start(server)
    watch = tmp_path / "watchdog.json"
    state(watch, "ok")
    routes = tmp_path / "routes.json"
    models = {
        "lab-tiny": {"url": url, "recipe": "lab-tiny", "slot": None, "host": "rank0", "watch": str(watch)},
        "elsewhere": {"url": url, "recipe": "e", "slot": "e", "host": "rank1", "watch": str(watch)},
    }
    routes.write_text(json.dumps({"models": models, "default": "lab-tiny"}))
    port, stop = serve(routes, "--node", "rank0")
    yield port, watch, routes
    server.RequestHandlerClass.release.set()  # type: ignore[attr-defined]
    stop()
    server.shutdown()


def post(port: int, model: str, timeout: float = 20) -> tuple[int, dict, dict, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    started = time.monotonic()
    conn.request(
        "POST", "/v1/chat/completions", body=json.dumps({"model": model}), headers={"Content-Type": "application/json"}
    )
    reply = conn.getresponse()
    return reply.status, json.loads(reply.read()), dict(reply.getheaders()), time.monotonic() - started


def test_a_deployment_its_watchdog_says_is_waiting_is_refused_at_once_with_the_cause(silent_gateway):
    port, watch, _ = silent_gateway
    state(watch, "waiting", "twin enp1s0f1np1 has no carrier")
    time.sleep(1.5)  # the gateway looks each second
    status, body, headers, took = post(port, "lab-tiny")
    assert status == 503 and took < 1, (status, body)
    assert body["error"]["code"] == "model_unavailable" and body["error"]["type"] == "api_error"
    assert (
        body["error"]["message"]
        == "model 'lab-tiny' cannot answer now: its watchdog waits: twin enp1s0f1np1 has no carrier"
    )
    assert headers["Retry-After"] == "10"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/metrics")
    assert 'model="lab-tiny"' in conn.getresponse().read().decode()  # counted as any answer is


def test_requests_in_flight_end_with_the_cause_when_it_becomes_known(silent_gateway):
    port, watch, _ = silent_gateway
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(post(port, "lab-tiny"))) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(1)  # all three wait on the engine now
    state(watch, "waiting", "rank 1 (192.168.100.11) does not answer: no route to it")
    for t in threads:
        t.join(15)
    assert len(results) == 3
    assert all(r[0] == 503 and "rank 1 (192.168.100.11) does not answer" in r[1]["error"]["message"] for r in results)
    assert all(r[3] < 5 for r in results), [r[3] for r in results]  # within a look of the state, not the timeout
    state(watch, "ok")
    time.sleep(1.5)
    Silent.release.set()


def test_a_deployment_led_by_another_node_is_not_judged_by_a_file_of_this_ones(silent_gateway):
    port, watch, _ = silent_gateway
    state(watch, "stood-down", stood_down={"why": "standing down"})
    time.sleep(1.5)
    assert post(port, "lab-tiny")[0] == 503
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps({"model": "elsewhere"}),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(TimeoutError):  # forwarded: the stand-in engine holds it (no refusal from rank 0's file)
        conn.getresponse()


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ({"status": "waiting", "why": "twin x has no carrier"}, "its watchdog waits: twin x has no carrier"),
        ({"status": "restarting"}, "its watchdog is restarting every rank"),
        (
            {"status": "stood-down", "stood_down": {"why": "3 failed probes"}},
            "its watchdog stood down: 3 failed probes",
        ),
        ({"status": "restarted-not-answering"}, "it did not answer after its watchdog restarted every rank"),
        ({"status": "ok"}, None),
        ({"status": "failing"}, None),  # still probing: it may answer
        ({"status": "waiting", "why": "x", "updated": time.time() - STALE_S - 1}, None),  # no watchdog writes it
        ({"status": "waiting", "why": "y" * 5000}, "its watchdog waits: " + "y" * 300),
    ],
)
def test_the_watchdogs_states_in_words(tmp_path, written, says):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"updated": time.time(), **written}))
    assert cause_of(str(path)) == says


@pytest.mark.parametrize("content", ["", "not json", "[]", '{"status": "waiting"}'])
def test_a_missing_or_odd_state_says_nothing(tmp_path, content):
    path = tmp_path / "w.json"
    path.write_text(content)
    assert cause_of(str(path)) is None and cause_of(str(tmp_path / "absent")) is None and cause_of(None) is None


def test_only_a_change_is_news_and_a_recovered_deployment_is_cleared(tmp_path):
    path = tmp_path / "w.json"
    table = {"models": {"m": {"host": "n0", "watch": str(path)}}}
    watch = Watch("n0")
    state(path, "waiting", "a")
    assert list(watch.look(table)) == ["m"] and watch.look(table) == {}
    state(path, "waiting", "b")
    assert watch.look(table) == {"m": "model 'm' cannot answer now: its watchdog waits: b"}
    state(path, "ok")
    assert watch.look(table) == {} and watch.causes == {}
    assert Watch(None).look(table) == {}  # a gateway that was not told its node reads no state


def test_a_connection_with_no_route_is_told_apart_from_one_refused():
    assert unreachable(OSError(errno.EHOSTUNREACH, "No route to host"))
    assert unreachable(OSError(errno.ENETUNREACH, "Network is unreachable"))
    assert not unreachable(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    key = aiohttp.client_reqrep.ConnectionKey("192.168.100.11", 9933, False, True, None, None, None)
    wrapped = aiohttp.ClientConnectorError(key, OSError(errno.EHOSTUNREACH, "No route to host"))
    assert unreachable(wrapped)
    try:
        raise RuntimeError("outer") from OSError(errno.EHOSTUNREACH, "inner")
    except RuntimeError as exc:
        assert unreachable(exc)


def test_a_route_is_looked_up_without_a_packet_sent():
    assert routed("http://127.0.0.1:9931") and routed("http://[::1]:9931") and routed("http://spark-a:9931")
    # 198.51.100.0/24 (TEST-NET-2): whatever this machine's routes, a lookup answers at once and sends nothing
    started = time.monotonic()
    routed("http://198.51.100.7:9933")
    assert time.monotonic() - started < 1


def test_a_deployment_beyond_a_cut_cable_is_unavailable_with_its_node_named(monkeypatch):
    from sparkplay.nodetools.serve import gateway_watch

    monkeypatch.setattr(gateway_watch, "routed", lambda url: "192.168.100.11" not in url)
    table = {
        "models": {
            "lab-small": {"host": "rank1", "url": "http://192.168.100.11:9933", "watch": None},
            "lab-tiny": {"host": "rank0", "url": "http://127.0.0.1:9931", "watch": None},
        }
    }
    assert Watch("rank0").look(table) == {
        "lab-small": "model 'lab-small' cannot answer now: no route to its node rank1 (the cable or its twin is down)"
    }
