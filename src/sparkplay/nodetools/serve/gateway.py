"""One OpenAI-compatible endpoint in front of every deployment on the leader, routing by the request's `model`.

Why sparkplay's own and not LiteLLM's proxy (docs/serving.md "The gateway" has the measurements): LiteLLM adds
or removes a model without a restart only with a PostgreSQL database behind it (its STORE_MODEL_IN_DB), and a
restart drops the in-flight streams of every other model; its proxy app registers 90 routes (keys, users,
prompts, MCP) whose advisories include SQL injection in the key check and template injection reachable without
a master key, the posture of a loopback gateway. What is needed here is narrow: route, list, stream, pass errors
through, follow a routes file. This does that and nothing else, on the standard library.

The routes file (JSON, written atomically by the serve role) maps each served name to its deployment:
    {"models": {"NAME": {"url": "http://127.0.0.1:8000", "recipe": "R"}, ...}}
It is re-read when its modification time changes (and on SIGHUP): a request already forwarded keeps its
upstream, so adding or stopping one model never touches another's in-flight request. Every request runs on its
own thread.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# what a client may send through (hop-by-hop headers and the host are the gateway's own)
FORWARDED = ("content-type", "authorization", "accept", "x-request-id")
PASSED_BACK = ("content-type", "x-request-id", "cache-control")
CHUNK = 64 * 1024


class Routes:
    """The routes file, re-read when it changes; a broken file keeps the last good routes (and says so once)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.stamp: tuple[int, int] | None = None
        self.models: dict[str, dict[str, str]] = {}
        self.problem = ""

    def current(self, force: bool = False) -> dict[str, dict[str, str]]:
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None
        with self.lock:
            if force or stamp != self.stamp:
                self.stamp = stamp
                self._load()
            return self.models

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            models = data["models"]
            checked = {str(k): {"url": str(v["url"]), "recipe": str(v.get("recipe", ""))} for k, v in models.items()}
            for name, route in checked.items():
                url = urlsplit(route["url"])
                if url.scheme != "http" or not url.hostname or url.path not in ("", "/"):
                    raise ValueError(f"{name}: {route['url']} is not http://HOST:PORT")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.problem = f"{self.path}: {exc}"
            return
        self.models, self.problem = checked, ""


def _error(status: int, message: str, kind: str, code: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


class Gateway(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sparkplay-gateway"
    routes: Routes
    max_body: int
    timeout_s: float

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the journal gets one line per failure instead (prompts never reach it)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        models = self.routes.current()
        path = urlsplit(self.path).path
        if path == "/health":
            self._send(200, json.dumps({"status": "ok", "models": sorted(models)}).encode())
        elif path == "/v1/models":
            data = [{"id": name, "object": "model", "owned_by": "sparkplay", "recipe": route["recipe"]}
                    for name, route in sorted(models.items())]  # fmt: skip
            self._send(200, json.dumps({"object": "list", "data": data}).encode())
        elif path.startswith("/v1/models/") and path[len("/v1/models/") :] in models:
            name = path[len("/v1/models/") :]
            self._send(200, json.dumps({"id": name, "object": "model", "owned_by": "sparkplay"}).encode())
        else:
            self._send(*_error(404, f"no such route: {path}", "invalid_request_error", "not_found"))

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        length = self.headers.get("Content-Length")
        if not path.startswith("/v1/") or length is None or not length.isdigit():
            self._send(*_error(400, "POST /v1/... with a Content-Length", "invalid_request_error", "bad_request"))
            return
        if int(length) > self.max_body:
            self.close_connection = True
            self._send(*_error(413, f"the body is over {self.max_body} bytes", "invalid_request_error", "too_large"))
            return
        body = self.rfile.read(int(length))
        try:
            model = json.loads(body).get("model")
        except (ValueError, AttributeError):
            model = None
        models = self.routes.current()
        if not isinstance(model, str) or model not in models:
            served = ", ".join(sorted(models)) or "none"
            self._send(*_error(404, f"model {model!r} is not served here (served: {served})",
                               "invalid_request_error", "model_not_found"))  # fmt: skip
            return
        self._forward(models[model], model, body)

    def _forward(self, route: dict[str, str], model: str, body: bytes) -> None:
        url = urlsplit(route["url"])
        headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED}
        upstream = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=self.timeout_s)
        try:
            upstream.request("POST", self.path, body=body, headers=headers)
            reply = upstream.getresponse()
        except OSError as exc:
            upstream.close()
            self._send(*_error(502, f"model {model!r} (recipe {route['recipe']}) does not answer at {route['url']}: "
                               f"{exc}", "api_error", "upstream_unavailable"))  # fmt: skip
            return
        try:
            self._relay(reply)
        finally:
            upstream.close()

    def _relay(self, reply: http.client.HTTPResponse) -> None:
        """The upstream's status, headers and body, each piece passed on as it arrives (streams stay streams)."""
        self.send_response(reply.status)
        for name, value in reply.getheaders():
            if name.lower() in PASSED_BACK:
                self.send_header(name, value)
        length = reply.getheader("Content-Length")
        if length is not None:
            self.send_header("Content-Length", length)
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while piece := reply.read1(CHUNK):
                self.wfile.write(piece if length is not None else b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            if length is None:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away, or the upstream broke off: nothing more can be said to either
            self.close_connection = True


def make_server(routes_file: str, listen: str, max_body: int = 16 * 1024 * 1024, timeout_s: float = 900) -> Any:
    """The gateway's server, bound, not yet serving."""
    host, _, port = listen.rpartition(":")
    routes = Routes(Path(routes_file))
    routes.current(force=True)
    handler = type("Handler", (Gateway,), {"routes": routes, "max_body": max_body, "timeout_s": timeout_s})
    server = ThreadingHTTPServer((host.strip("[]"), int(port)), handler)
    server.daemon_threads = True
    server.routes = routes  # type: ignore[attr-defined]
    return server


def cmd_gateway(args: argparse.Namespace) -> int:
    server = make_server(args.routes, args.listen, args.max_body, args.timeout)
    signal.signal(signal.SIGHUP, lambda *_: server.routes.current(force=True))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    server.serve_forever()
    return 0
