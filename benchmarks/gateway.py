"""What the gateway adds to a request: a completion and a stream through `sparkplay-serve gateway`, against
the same requests sent straight to the engine (the baseline: a client that knows the engine's port), in one
run, on this machine.

The engine is a stand-in (an HTTP server in this process answering as an OpenAI server does: a small JSON
completion, or a stream of EVENTS server-sent events), so the figures are the gateway's own cost, not an
engine's. Each side runs the same REQUESTS requests from CONCURRENCY client threads, each on its own
connection per request (as OpenAI clients without keep-alive do); the median and 95th percentile latency
and the requests per second are reported. The last line is JSON.

    python benchmarks/gateway.py [--requests 2000] [--concurrency 4] [--events 64]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sparkplay.nodetools.serve.gateway import make_server

REPLY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "391"}}], "model": "m"}).encode()


class Engine(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    events = 64

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(REPLY)))
            self.end_headers()
            self.wfile.write(REPLY)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(self.events):
            data = f"data: {json.dumps({'choices': [{'delta': {'content': str(i)}}]})}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (14, b"data: [DONE]\n\n"))


def one(port: int, stream: bool) -> float:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "17*23?"}], "stream": stream})
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    if response.status != 200 or (stream and not data.rstrip().endswith(b"[DONE]")):
        raise SystemExit(f"bad answer {response.status}: {data[:200]!r}")
    return time.perf_counter() - started


def side(port: int, stream: bool, requests: int, concurrency: int) -> dict[str, float]:
    for _ in range(50):  # warm up
        one(port, stream)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        times = sorted(pool.map(lambda _: one(port, stream), range(requests)))
    wall = time.perf_counter() - started
    return {"median_ms": round(statistics.median(times) * 1000, 3),
            "p95_ms": round(times[int(len(times) * 0.95)] * 1000, 3), "rps": round(requests / wall, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--events", type=int, default=64)
    args = parser.parse_args()
    Engine.events = args.events
    engine = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as scratch:
        routes = Path(scratch) / "routes.json"
        routes.write_text(
            json.dumps({"models": {"m": {"url": f"http://127.0.0.1:{engine.server_port}", "recipe": "r"}}})
        )
        gateway = make_server(str(routes), "127.0.0.1:0", 16 << 20, 30)
        threading.Thread(target=gateway.serve_forever, daemon=True).start()
        result = {}
        for kind, stream in (("completion", False), (f"stream of {args.events} events", True)):
            direct = side(engine.server_port, stream, args.requests, args.concurrency)
            through = side(gateway.server_port, stream, args.requests, args.concurrency)
            added = round(through["median_ms"] - direct["median_ms"], 3)
            print(f"{kind}: direct (baseline) median {direct['median_ms']} ms, p95 {direct['p95_ms']} ms, "
                  f"{direct['rps']} req/s; through the gateway median {through['median_ms']} ms, p95 "
                  f"{through['p95_ms']} ms, {through['rps']} req/s; added {added} ms a request")  # fmt: skip
            result[kind] = {"direct": direct, "gateway": through, "added_median_ms": added}
    print(json.dumps({"requests": args.requests, "concurrency": args.concurrency, **result}))


if __name__ == "__main__":
    main()
