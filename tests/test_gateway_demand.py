"""Models served on demand behind the gateway: started when asked for, the least recently used stopped to make
room, never one with a request in flight, stopped after their TTL, refused clearly when they cannot fit.

The engines are the stand-ins of test_gateway.py, each started and stopped by a stand-in swapper (a unix
socket server in this process, speaking the swapper's protocol) instead of systemd: units cannot run here.
The real swapper's own checks (which models and units it acts on) are tested at the end; the lab runs the
whole of it (tests/test_several_lab.py)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import socketserver
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkplay.nodetools.serve.gateway_files import Routes
from sparkplay.nodetools.serve.gateway_main import in_thread
from sparkplay.nodetools.serve.swapper import units_of
from tests.test_gateway import Engine

GIB = 1 << 30


def free_ports(count: int) -> list[int]:
    """COUNT distinct free ports: each held until all are chosen (one closed before the next is asked for may
    be handed out again, and two engines on one port answer for each other)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class Lab:
    """Stand-in engines on fixed ports, started and stopped through a stand-in swapper's socket."""

    def __init__(self, folder: Path, names: list[str], claim: int, budget: int, ttl: float) -> None:
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.running: dict[str, ThreadingHTTPServer] = {}
        self.ops: list[str] = []
        self.release = threading.Event()
        self.fail: set[str] = set()
        self.routes = folder / "routes.json"
        self.routes.write_text(
            json.dumps(
                {
                    "models": {
                        n: {
                            "url": f"http://127.0.0.1:{p}",
                            "recipe": n,
                            "slot": n,
                            "host": "n1",
                            "on_demand": True,
                            "claim": claim,
                            "units": [f"sparkplay-serve@{n}.service"],
                        }
                        for n, p in self.ports.items()
                    },
                    "budgets": {"n1": budget},
                    "ttl_s": ttl,
                    "wait_s": 10,
                }
            )
        )
        self.socket = str(folder / "swapper.sock")
        lab = self

        class Swapper(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                asked = json.loads(self.rfile.readline())
                lab.ops.append(f"{asked['op']} {asked['model']}")
                ok = asked["model"] not in lab.fail
                if ok:
                    (lab.start if asked["op"] == "start" else lab.stop)(asked["model"])
                self.wfile.write(json.dumps({"ok": ok, "error": None if ok else "unit failed"}).encode() + b"\n")

        self.swapper = socketserver.ThreadingUnixStreamServer(self.socket, Swapper)
        threading.Thread(target=self.swapper.serve_forever, args=(0.05,), daemon=True).start()

    def start(self, name: str) -> None:
        ThreadingHTTPServer.allow_reuse_address = True
        handler = type(name, (Engine,), {"name": name, "release": self.release, "seen": []})
        server = ThreadingHTTPServer(("127.0.0.1", self.ports[name]), handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self.running[name] = server

    def stop(self, name: str) -> None:
        server = self.running.pop(name, None)
        if server is not None:
            server.shutdown()
            server.server_close()

    def close(self) -> None:
        for name in list(self.running):
            self.stop(name)
        self.swapper.shutdown()
        self.swapper.server_close()


@pytest.fixture
def lab(tmp_path):
    made = []

    def make(claim: int = GIB, budget: int = int(2.5 * GIB), ttl: float = 600) -> tuple[Lab, int, Path]:
        lab = Lab(tmp_path, ["alpha", "beta", "gamma"], claim, budget, ttl)
        state = tmp_path / "state.json"
        (_, port), stop = in_thread(
            [
                "--routes",
                str(lab.routes),
                "--listen",
                "127.0.0.1:0",
                "--swapper",
                lab.socket,
                "--state",
                str(state),
                "--grace",
                "0.2",
            ]
        )
        made.append((lab, stop))
        return lab, port, state

    yield make
    for lab, stop in made:
        stop()
        lab.close()


def ask(port: int, model: str, stream: bool = False) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps({"model": model, "stream": stream}),
        headers={"Content-Type": "application/json"},
    )
    reply = conn.getresponse()
    body = reply.read()
    return reply.status, (json.loads(body) if not stream else {"raw": body.decode()}), dict(reply.getheaders())


def test_each_asked_for_is_started_and_the_least_recently_used_makes_room(lab):
    lab, port, _ = lab()
    assert [ask(port, m)[:2] for m in ("alpha", "beta")] == [
        (200, {"served_by": "alpha", "path": "/v1/chat/completions", "auth": None}),
        (200, {"served_by": "beta", "path": "/v1/chat/completions", "auth": None}),
    ]
    assert ask(port, "alpha")[0] == 200  # alpha used last now: beta is the least recently used
    status, body, _ = ask(port, "gamma")  # 3 x 1 GiB do not fit in 2.5 GiB
    assert status == 200 and body["served_by"] == "gamma"
    assert lab.ops == ["start alpha", "start beta", "stop beta", "start gamma"]
    assert sorted(lab.running) == ["alpha", "gamma"]


def test_a_gateway_that_restarted_learns_what_runs_beside_before_it_makes_room(lab):
    """alpha and beta run (started before this gateway did: it was killed, or its node rebooted) and gamma is
    asked for: the gateway finds them running and stops the least recently used first, instead of asking the
    swapper for a start past the budget (which it refuses: the soak's 503s, issue 55)."""
    lab, port, _ = lab()
    lab.start("alpha")
    lab.start("beta")
    status, body, _ = ask(port, "gamma")
    assert status == 200 and body["served_by"] == "gamma"
    assert lab.ops[0].startswith("stop ") and lab.ops[-1] == "start gamma", lab.ops
    assert len(lab.running) == 2


def test_a_model_with_a_request_in_flight_is_never_stopped_to_make_room(lab):
    lab, port, _ = lab()
    assert ask(port, "alpha")[0] == 200
    assert ask(port, "beta")[0] == 200
    streaming = threading.Thread(target=ask, args=(port, "alpha", True))  # alpha: in flight, and the LRU
    streaming.start()
    time.sleep(0.3)
    status, _, _ = ask(port, "gamma")
    assert status == 200 and lab.ops[-2:] == ["stop beta", "start gamma"] and "stop alpha" not in lab.ops
    lab.release.set()
    streaming.join(10)


def test_idle_models_stop_after_their_ttl_and_status_can_read_it(lab):
    lab, port, state = lab(ttl=1)
    assert ask(port, "alpha")[0] == 200
    said = json.loads(state.read_text()) if state.exists() else {}
    for _ in range(50):
        if not lab.running:
            break
        time.sleep(0.1)
    assert lab.running == {} and lab.ops == ["start alpha", "stop alpha"]
    time.sleep(1.2)
    said = json.loads(state.read_text())
    assert said["models"]["alpha"]["state"] == "stopped on demand"
    assert ask(port, "alpha")[0] == 200  # and it comes back when asked for again


def test_what_cannot_fit_or_start_is_a_clear_503_with_retry_after(lab):
    lab, port, _ = lab(claim=3 * GIB)
    status, body, headers = ask(port, "alpha")
    assert status == 503 and "claims 3.0 GiB, more than the 2.5 GiB" in body["error"]["message"]
    assert headers["Retry-After"] and lab.ops == []


def test_a_model_whose_unit_fails_to_start_is_a_503_and_the_journal_has_why(lab):
    lab, port, _ = lab()
    lab.fail.add("alpha")
    status, body, headers = ask(port, "alpha")
    assert status == 503 and "could not be started" in body["error"]["message"] and "Retry-After" in headers
    lab.fail.clear()
    assert ask(port, "alpha")[0] == 200  # the next request tries again


def test_the_metrics_count_loads_evictions_and_requests_per_model(lab):
    lab, port, _ = lab()
    for model in ("alpha", "beta", "gamma"):
        assert ask(port, model)[0] == 200
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    assert 'sparkplay_gateway_load_seconds_count{model="gamma"} 1.0' in text
    assert 'sparkplay_gateway_evictions_total{model="alpha"} 1.0' in text
    assert 'sparkplay_gateway_requests_total{code="200",model="beta"} 1.0' in text
    assert 'sparkplay_gateway_queue_depth{model="alpha"} 0.0' in text


def test_the_swapper_acts_only_on_models_on_demand_and_their_own_units(tmp_path):
    route = {
        "url": "http://127.0.0.1:9",
        "slot": "lab-a",
        "on_demand": True,
        "units": ["sparkplay-serve@lab-a.service", "sparkplay-serve-watchdog@lab-a.service"],
    }
    assert units_of(route) == ["sparkplay-serve@lab-a.service", "sparkplay-serve-watchdog@lab-a.service"]
    for units in (["ssh.service"], ["sparkplay-serve@lab-b.service"], ["sparkplay-serve@lab-a.service; reboot"], []):
        with pytest.raises(ValueError):
            units_of({**route, "units": units})
    with pytest.raises(ValueError):
        units_of({**route, "slot": None})
    # the routes it reads are the gateway's: a file not root's, or a link, is not read
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps({"models": {"a": route}}))
    assert Routes(routes).current()["models"]["a"]["on_demand"] is True


@pytest.mark.parametrize("length", [1, 63, 64])
def test_the_swapper_takes_every_slot_a_recipe_name_can_be(length):
    """A model on demand named with the 64 characters a recipe name may have could never start (issue 54)."""
    from sparkplay.recipes.model import NAME_PATTERN

    slot = "m" * length
    assert NAME_PATTERN.match(slot)
    route = {"slot": slot, "on_demand": True}
    route["units"] = [f"sparkplay-serve@{slot}.service", f"sparkplay-serve-watchdog@{slot}.service"]
    assert units_of(route) == route["units"]
    too_long = "m" * 65
    assert not NAME_PATTERN.match(too_long)
    with pytest.raises(ValueError):
        units_of({**route, "slot": too_long, "units": [f"sparkplay-serve@{too_long}.service"]})


def test_the_gateways_install_pins_every_package_with_its_hashes():
    """What the serve role installs on the leader: aiohttp and prometheus_client (its /metrics), each file's
    sha256 pinned, from PyPI only."""
    from tests.conftest import PROJECT

    lock = (PROJECT / "roles/serve/files/gateway.lock").read_text()
    pinned = {line.split("==")[0] for line in lock.splitlines() if "==" in line and not line.startswith("#")}
    assert {"aiohttp", "prometheus-client", "multidict", "yarl"} <= pinned
    body = lock[lock.index("\n\n") :]  # past the header
    for block in body.split("==")[1:]:
        assert "--hash=sha256:" in block.split("\n")[1], block[:80]
    assert "--index-url" not in lock and "--find-links" not in lock and "file://" not in lock
    tasks = (PROJECT / "roles/serve/tasks/gateway.yml").read_text()
    assert "--require-hashes" in tasks and "gateway.lock" in tasks


def test_the_routes_the_roles_write_are_the_routes_the_gateway_reads(tmp_path):
    """served.routes (the serve and stop roles' rule) and gateway_files.Routes (the node's reader) agree
    on every field the gateway and the swapper act on."""
    from sparkplay.served import routes

    found = [
        {
            "role": "leader",
            "slot": "lab-od-a",
            "host": "rank1",
            "served_name": "lab-od-a",
            "recipe": "lab-od-a",
            "api_url": "http://192.168.100.11:9941",
            "on_demand": True,
            "watchdog_unit": "w",
            "claim": {"bytes": GIB},
        },
        {
            "role": "leader",
            "slot": None,
            "host": "rank0",
            "served_name": "lab-tiny",
            "recipe": "lab-tiny",
            "api_url": "http://127.0.0.1:9931",
            "claim": {"bytes": 2 * GIB},
            "watchdog_unit": "sparkplay-serve-watchdog.service",
            "watchdog_state": "/var/lib/sparkplay/watchdog.json",
            "first_byte_s": 120,
        },
    ]
    meminfo = "MemTotal: 25165824 kB\nMemAvailable: 20971520 kB\n"
    table = routes(found, demand={"ttl_s": 30, "wait_s": 60, "budget_gib": 0, "meminfo": {"rank0": meminfo}})
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(table))
    read = Routes(path).current()
    assert read["models"]["lab-od-a"] == {
        "url": "http://192.168.100.11:9941",
        "recipe": "lab-od-a",
        "slot": "lab-od-a",
        "host": "rank1",
        "on_demand": True,
        "claim": GIB,
        "units": ["sparkplay-serve@lab-od-a.service", "sparkplay-serve-watchdog@lab-od-a.service"],
        "unit": None,  # its record names no unit: the page reads no memory of it
        "watch": None,  # its record names no state file
        "first_byte_s": None,  # a record from before the bound: the gateway's --timeout
    }
    assert read["models"]["lab-tiny"]["on_demand"] is False and read["default"] == "lab-tiny"
    assert read["models"]["lab-tiny"]["first_byte_s"] == 120.0
    assert read["models"]["lab-tiny"]["watch"] == "/var/lib/sparkplay/watchdog.json"  # the gateway's node reads it
    assert (read["ttl_s"], read["wait_s"], read["budgets"]) == (30, 60, {"rank0": 24 * GIB - 4 * GIB - 2 * GIB})
    assert read["nodes"]["rank0"] == {
        "total_bytes": 24 * GIB,
        "reserve_bytes": 4 * GIB,
        "claims": {"lab-tiny": 2 * GIB},
    }
    assert units_of(read["models"]["lab-od-a"])  # and the swapper takes its units


def test_the_swapper_holds_a_start_to_the_nodes_budget_itself(tmp_path, monkeypatch):
    """Issue 54: only the gateway (which the swapper is meant to distrust) enforced the budget for models on
    demand; now the swapper refuses a start that would take the node past it, counting what runs there."""
    from sparkplay.nodetools.serve import swapper

    def route(slot: str, claim_gib: float, host: str = "rank1") -> dict:
        return {
            "url": "http://192.168.100.11:9941",
            "recipe": slot,
            "slot": slot,
            "host": host,
            "on_demand": True,
            "claim": int(claim_gib * GIB),
            "units": [f"sparkplay-serve@{slot}.service", f"sparkplay-serve-watchdog@{slot}.service"],
        }

    table = {
        "models": {"a": route("a", 6), "b": route("b", 6), "c": route("c", 3), "far": route("far", 20, "rank0")},
        "budgets": {"rank1": 10 * GIB, "rank0": 30 * GIB},
    }
    running = {"a"}
    is_running = lambda r: r["slot"] in running  # noqa: E731
    refused = swapper.over_budget(table, "b", is_running)
    assert refused and "b claims 6.0 GiB and a hold 6.0 GiB of the 10.0 GiB rank1 keeps" in refused
    assert swapper.over_budget(table, "c", is_running) is None  # 6 + 3 fit in 10
    running.add("far")  # another node's model does not count here
    assert swapper.over_budget(table, "c", is_running) is None
    assert swapper.over_budget({**table, "budgets": {}}, "b", is_running) is None  # no budget written: not held
    # through the socket, as the gateway asks: refused with the reason, nothing started
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(table))
    started: list = []
    monkeypatch.setattr(swapper, "running", lambda r: r["slot"] in running)
    monkeypatch.setattr(swapper, "systemctl", lambda r, op, units: started.append((op, units)) or (True, ""))

    async def ask(model: str) -> dict:
        routes = swapper.Routes(path, owner=os.getuid())
        routes.current(force=True)
        reader = asyncio.StreamReader()
        reader.feed_data(json.dumps({"op": "start", "model": model}).encode() + b"\n")
        reader.feed_eof()
        sent: list[bytes] = []

        class Writer:
            def write(self, data: bytes) -> None:
                sent.append(data)

            async def drain(self) -> None:
                pass

            def close(self) -> None:
                pass

        await swapper.serve_one(routes, reader, Writer())
        return json.loads(b"".join(sent))

    answer = asyncio.run(ask("b"))
    assert answer["ok"] is False and "stop one first" in answer["error"] and started == []
    assert asyncio.run(ask("c")) == {"ok": True} and started == [("start", swapper.units_of(table["models"]["c"]))]


def test_a_start_on_demand_keeps_its_receipt_and_the_first_answer_is_its_first_token(lab):
    """A swap's receipt (issue 59): seconds from the gateway asking for the model to its port, its health and
    the first byte of the first answer after it; in the gateway's state file, which status reads."""
    from sparkplay.served import gateway_row

    lab, port, state = lab()
    assert ask(port, "alpha")[0] == 200
    for _ in range(30):  # the state file is rewritten every second
        kept = (json.loads(state.read_text()) if state.exists() else {}).get("models", {}).get("alpha", {})
        if (kept.get("receipt") or {}).get("first_token_s") is not None:
            break
        time.sleep(0.2)
    receipt = kept["receipt"]
    assert receipt["since"] == "asked for"
    assert 0 <= receipt["port_open_s"] <= receipt["http_ready_s"] <= receipt["first_token_s"], receipt
    assert (kept.get("receipt") or {}).get("first_token_s") == receipt["first_token_s"]
    # a second request does not move it: the receipt is of the start
    assert ask(port, "alpha")[0] == 200
    time.sleep(1.2)
    assert json.loads(state.read_text())["models"]["alpha"]["receipt"] == receipt
    row = gateway_row(lab.routes.read_text(), "ActiveState=active", "n1", state.read_text())
    assert row["receipts"]["alpha"] == receipt and row["receipts"]["beta"] is None
