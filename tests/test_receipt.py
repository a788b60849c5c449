"""A start's receipt (issue 59): the serve tool's readiness wait times the leader's start step by step, ready
meaning the first streamed token of a real request, and status reads the last one back.

The engine is a stand-in on http.server (no GPU here) that behaves as a starting engine does: its port opens
first, /health answers later, its model is listed, and its first request takes a while (kernels compiled
on first use) before the first token streams.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkplay import integrity
from sparkplay.engines.systemd import status_rows
from sparkplay.nodetools.serve import ready as serve_ready
from sparkplay.nodetools.serve import receipt
from sparkplay.served import added_rows
from tests.test_layout import lay

HEALTHY_AFTER = 0.6  # seconds after the port opens
COMPILE = 0.4  # the first request's wait before its first token


class Starting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    opened = 0.0
    streams = True
    compiled = False

    def log_message(self, *_: object) -> None:
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if time.monotonic() - self.opened < HEALTHY_AFTER:
            self._send(503, {"error": "loading"})
        elif self.path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(200, {"data": [{"id": "m"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not type(self).compiled:
            time.sleep(COMPILE)
            type(self).compiled = True
        if not body.get("stream"):
            self._send(200, {"choices": [{"message": {"content": "391"}}], "usage": {"completion_tokens": 1}})
            return
        if not self.streams:
            self._send(400, {"error": "no streams here"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in ({"choices": [{"delta": {"role": "assistant"}}]}, {"choices": [{"delta": {"content": "391"}}]}):
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture
def engine() -> Iterator[tuple[str, type[Starting]]]:
    handler = type("Engine", (Starting,), {"opened": time.monotonic(), "compiled": False})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def ready_args(url: str, path: Path) -> argparse.Namespace:
    return argparse.Namespace(
        url=url,
        model="m",
        unit="sparkplay-serve.service",
        timeout=20,
        interval=2,
        prompt="What is 17*23?",
        max_tokens=4,
        progress=None,
        receipt=str(path),
        container=None,
        peers=[],
        api_key_env=None,
    )


def started_ago(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The unit's main process started `seconds` ago, as systemd says it (the lab and a Spark have systemd;
    these tests read the property through this stand-in)."""
    at = int((time.monotonic() - seconds) * 1e6)
    monkeypatch.setattr(receipt, "unit_show", lambda unit, *props: {"ExecMainStartTimestampMonotonic": str(at)})
    monkeypatch.setattr(serve_ready, "unit_show", lambda unit, *props, peer=None: {"ActiveState": "active"})
    monkeypatch.setattr(serve_ready, "port_holder_problem", lambda *args: None)


def test_a_start_is_timed_from_the_units_start_to_its_first_streamed_token_and_status_reads_it_back(
    engine, tmp_path, monkeypatch, capsys
):
    url, _ = engine
    started_ago(monkeypatch, 0.2)
    path = tmp_path / "receipts" / "sparkplay-serve.service.json"
    assert serve_ready.cmd_ready(ready_args(url, path)) == 0
    said = json.loads(capsys.readouterr().out)
    kept = json.loads(path.read_text())
    assert said["ready"] and said["receipt"] == kept and kept["since"] == "unit start"
    steps = [kept[k] for k in ("port_open_s", "http_ready_s", "listed_s", "first_token_s", "answer_s")]
    assert all(isinstance(s, float) for s in steps) and steps == sorted(steps), kept
    assert kept["http_ready_s"] >= HEALTHY_AFTER - 0.5  # polled every half second at most
    # ready is the first token of a real request: the first request's wait is in it
    assert kept["first_token_s"] - kept["listed_s"] >= COMPILE
    assert path.stat().st_mode & 0o777 == 0o644
    # status: the probe reads the last start's receipt back
    probe = argparse.Namespace(url=url, model="m", unit=None, container=None, receipt=str(path), api_key_env=None)
    assert serve_ready.cmd_probe(probe) == 0
    assert json.loads(capsys.readouterr().out)["receipt"] == kept


def test_a_wait_that_follows_no_start_keeps_the_last_receipt(engine, tmp_path, monkeypatch, capsys):
    url, _ = engine
    path = tmp_path / "receipt.json"
    path.write_text('{"since": "unit start", "first_token_s": 12.5}')
    started_ago(monkeypatch, receipt.FRESH_S + 60)  # the unit ran long before this wait: nothing was started
    assert serve_ready.cmd_ready(ready_args(url, path)) == 0
    assert "receipt" not in json.loads(capsys.readouterr().out)
    assert json.loads(path.read_text())["first_token_s"] == 12.5


def test_an_api_that_streams_no_token_has_none_and_is_still_proven_by_its_answer(engine, tmp_path, monkeypatch, capsys):
    url, handler = engine
    handler.streams = False
    started_ago(monkeypatch, 0.1)
    path = tmp_path / "receipt.json"
    assert serve_ready.cmd_ready(ready_args(url, path)) == 0
    kept = json.loads(path.read_text())
    assert kept["first_token_s"] is None and kept["answer_s"] is not None


def test_the_first_token_waits_past_events_without_one_and_a_refusal_is_none(engine):
    url, handler = engine
    handler.opened = 0.0  # healthy already
    seconds = receipt.first_token(url, "m", "Hi", 4, timeout=5)
    assert seconds is not None and seconds >= COMPILE
    assert receipt.first_token("http://127.0.0.1:9", "m", "Hi", 4, timeout=1) is None  # nothing listens


def test_a_receipt_is_read_only_from_a_small_regular_file(tmp_path):
    real = tmp_path / "r.json"
    real.write_text('{"first_token_s": 1.0}')
    assert receipt.read(str(real)) == {"first_token_s": 1.0}
    (tmp_path / "link.json").symlink_to(real)
    assert receipt.read(str(tmp_path / "link.json")) is None  # root never follows a link planted there
    (tmp_path / "big.json").write_text('{"x": "' + "a" * (receipt.MAX_BYTES + 1) + '"}')
    assert receipt.read(str(tmp_path / "big.json")) is None
    for text in ("[1]", "not json"):
        (tmp_path / "odd.json").write_text(text)
        assert receipt.read(str(tmp_path / "odd.json")) is None
    assert receipt.read(str(tmp_path / "absent.json")) is None


def test_the_receipts_place_is_one_rule_for_the_wait_the_probe_and_status():
    path = integrity.receipt_file("/var/lib/sparkplay", "sparkplay-serve@coder.service")
    assert path == "/var/lib/sparkplay/receipts/sparkplay-serve@coder.service.json"
    record = {
        "unit": "sparkplay-serve@coder.service",
        "api_url": "http://127.0.0.1:8001",
        "served_name": "coder",
        "state_dir": "/var/lib/sparkplay",
    }
    argv = integrity.probe_argv(record, "/usr/local/lib/sparkplay/sparkplay-serve")
    assert argv[argv.index("--receipt") + 1] == path
    _, laid = lay("lab-tiny", serve_state_dir="/var/lib/sparkplay")
    assert laid["receipt_argv"] == [
        "--receipt",
        integrity.receipt_file("/var/lib/sparkplay", "sparkplay-serve.service"),
    ]
    # only the wait after a start keeps one: the quick look of a run that started nothing never writes it
    assert "--receipt" not in laid["quick_ready_argv"] and "--receipt" not in laid["ready_argv"]
    kept = {"since": "unit start", "first_token_s": 3.2}
    leader = {"role": "leader", "rank": 0, "unit": "sparkplay-serve.service", "served_name": "m"}
    rows = status_rows({"spark-0": leader}, {"spark-0": {"ActiveState": "active"}}, {"receipt": kept})
    assert rows[0]["receipt"] == kept
    added = {**record, "host": "spark-0", "recipe": "coder"}
    seen = {"stdout": json.dumps({"health": True, "served": True, "answers": True, "receipt": kept})}
    show = {"item": added, "stdout": "ActiveState=active\nSubState=running"}
    assert added_rows([show], [seen])[0]["receipt"] == kept
