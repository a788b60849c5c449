"""`sparkplay soak` against a real inventory (sparkplay.soak): the loopback-only client and what it records, the
faults allowed (none unless named), the engines a fault may be made on, a run with no fault writing the lab
soak's report with the rules that apply here, and the CLI's refusals. The API here is a stand-in (a Python HTTP
server shaped as the gateway is: /v1/models, /health, chat and completions, streamed or not); the faults made
through Ansible on real units are tests/test_soak_lab.py's, on the lab."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from sparkplay.errors import BadInput
from sparkplay.soak import client as soak_client
from sparkplay.soak import cluster
from tests.conftest import run_cli

MODELS = {"tiny": False, "coder-a": True}  # served name -> on demand


class API(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    auth: ClassVar[list[str]] = []

    def log_message(self, *_: object) -> None:
        pass

    def _send(self, status: int, doc: object, kind: str = "application/json") -> None:
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"data": [{"id": name} for name in MODELS]})
        elif self.path == "/health":
            self._send(200, {"models": {n: {"state": "serving", "on_demand": od} for n, od in MODELS.items()}})
        else:
            self._send(404, {"error": "no such route"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.auth.append(self.headers.get("Authorization", ""))
        if body["model"] not in MODELS:
            self._send(404, {"error": {"message": f"model {body['model']!r} is not served here"}})
        elif body.get("stream"):
            self._send(200, b'data: {"choices": [{"text": "3"}]}\n\ndata: [DONE]\n\n', "text/event-stream")
        else:
            self._send(200, {"choices": [{"text": "391"}]})


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), API)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.mark.parametrize("url", ["http://10.0.0.5:9930/v1", "https://127.0.0.1/v1", "http://127.0.0.1/v1?x=1", "x"])
def test_the_load_goes_only_to_this_machines_loopback(url: str):
    with pytest.raises(BadInput, match="is not an http URL on this machine's loopback"):
        soak_client.loopback_url(url)


def test_a_loopback_url_keeps_its_port_and_path():
    assert soak_client.loopback_url("http://127.0.0.1:9930/v1/") == ("127.0.0.1", 9930, "/v1")
    assert soak_client.loopback_url("http://[::1]:8000") == ("::1", 8000, "/v1")
    assert soak_client.loopback_url("http://localhost:1/api/v1") == ("localhost", 1, "/api/v1")


def test_the_key_comes_from_a_file_and_is_sent_as_a_bearer_token(api: str, tmp_path: Path):
    key = tmp_path / "key"
    key.write_text("sk-soak\n")
    client = soak_client.Client(api, soak_client.read_key(key))
    assert client.send("tiny", "chat", False, 5).ok
    assert API.auth[-1] == "Bearer sk-soak"
    key.write_text("")
    with pytest.raises(BadInput, match="is empty"):
        soak_client.read_key(key)
    with pytest.raises(BadInput, match="cannot be read as a key"):
        soak_client.read_key(tmp_path / "gone")


def test_each_request_is_recorded_whole_or_failed_with_its_figures(api: str):
    client = soak_client.Client(api)
    assert client.models() == (["tiny"], ["coder-a"])  # the gateway's /health says which is on demand
    for api_kind in ("chat", "completion"):
        for stream in (False, True):
            done = client.send("tiny", api_kind, stream, 5)
            assert done.ok and done.status == 200 and done.bytes > 0 and done.latency_s >= done.first_byte_s > 0
    missing = client.send("gone", "chat", False, 5)
    assert not missing.ok and missing.status == 404 and "is not served here" in missing.error
    closed = soak_client.Client("http://127.0.0.1:9/v1").send("tiny", "chat", False, 2)  # nothing listens
    assert not closed.ok and closed.status == 0 and "ConnectionRefusedError" in closed.error


def test_faults_are_none_unless_named_and_only_the_gentle_kinds_or_reboot():
    assert cluster.allowed(None) == [] and cluster.allowed("none") == [] and cluster.allowed("") == []
    assert cluster.allowed("engine-kill, reboot") == ["engine-kill", "reboot"]
    with pytest.raises(BadInput, match="cable-long, node-off, which sparkplay soak does not make"):
        cluster.allowed("engine-kill,cable-long,node-off")


def test_a_fault_is_made_only_on_an_engine_serving_now_never_on_a_model_on_demand():
    doc = {
        "ranks": [
            {"host": "spark0", "unit": "sparkplay-serve.service", "up": True},
            {"host": "spark1", "unit": "sparkplay-serve.service", "up": False},  # down already
        ],
        "added": [
            {"host": "spark1", "unit": "sparkplay-serve@small.service", "state": "active/running", "health": "ok"},
            {"host": "spark1", "unit": "sparkplay-serve@a.service", "state": "inactive/dead", "health": "on demand"},
            {"host": "spark1", "unit": "sparkplay-serve@b.service", "state": "active/running", "health": "on demand"},
        ],
    }
    assert cluster.targets(doc) == [("spark0", "sparkplay-serve.service"), ("spark1", "sparkplay-serve@small.service")]
    assert cluster.targets([{"host": "spark0", "unit": "sparkplay-serve.service", "up": True}]) == [
        ("spark0", "sparkplay-serve.service")
    ]


def test_a_soak_without_faults_loads_every_model_and_reports_the_rules_that_apply(api: str, tmp_path: Path):
    said: list[str] = []
    hosts = tmp_path / "hosts.yml"  # never read: no fault is made, so no playbook runs
    schedule = cluster.Schedule(minutes=0.1, seed=3, rate=5)
    report = cluster.run(tmp_path, hosts, soak_client.Client(api), schedule, tmp_path / "report", said.append)
    assert said[0] == "soak: tiny always on; coder-a on demand"
    assert report["requests_total"] >= 10 and report["availability_outside_faults"] == 1.0
    assert {r["model"] for r in report["requests"]} == {"tiny", "coder-a"}
    assert set(report["rules"]) == {"availability outside faults >= 99.5%", "every fault recovered within its bound"}
    assert report["passed"] and len(report["not_measured"]) == 4
    written = json.loads((tmp_path / "report" / "report.json").read_text())
    assert written["where"] == f"the nodes of {tmp_path / 'hosts.yml'}" and written["faults"] == []
    assert "Not measured here" in (tmp_path / "report" / "report.md").read_text()
    assert (tmp_path / "report" / "requests.png").stat().st_size > 5_000


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--faults", "engine-kill"], 3, "the soak makes engine-kill on real nodes and no terminal is here to ask"),
        (["--faults", "cable-long"], 2, "which sparkplay soak does not make on real nodes"),
        (["--url", "http://192.168.1.5:9930/v1"], 2, "is not an http URL on this machine's loopback"),
        (["--bound", "3"], 2, "--bound 3 is out of range"),
    ],
)
def test_the_cli_refuses_before_any_load_or_fault(tmp_path: Path, api: str, args: list[str], code: int, said: str):
    hosts = tmp_path / "hosts.yml"
    hosts.write_text("all:\n  children:\n    sparkplay_nodes:\n      hosts:\n        spark0: {}\n")
    proc = run_cli("soak", "--report", str(tmp_path / "r"), "--url", api, "-i", str(hosts), *args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert said in " ".join(proc.stderr.split()), proc.stderr
    assert not (tmp_path / "r").exists()
