"""What the gateway adds to a request, in one run, on this machine: the same requests sent straight to the engine
(the baseline: a client that knows the engine's port) and through `sparkplay-serve gateway`.

Three processes, as on a node: the engine, the gateway (the serve tool's own command) and the clients. The
engine is a stand-in (aiohttp, answering as an OpenAI server does), so the figures are the gateway's own cost:
- a small completion at concurrency 1, answered at once: the median and 95th percentile latency;
- concurrency 64, each completion taking ENGINE_MS of the engine's time (waiting, as on a GPU, not the CPU):
  requests per second;
- a stream of EVENTS server-sent events at concurrency 4;
- the small completion while IDLE connections sit open on the gateway (clients that connected and said
  nothing): how much later it answers than without them.
- the small completion against a second stand-in built on Python's own `http.server`, which writes an
  answer's headers and body in two sends (as engines that leave Nagle's algorithm on do): through this tree's
  gateway and, with --before REV, through the gateway of that git revision (a worktree, its own code).
Clients keep their connections (as OpenAI's clients do), through gateway_tcp's connector: a plain pooled
client straight to the http.server stand-in waits 40 ms for the kernel's delayed acknowledgement on every
request, which would make the baseline, not the gateway, slow. The last line is JSON.

    python benchmarks/gateway.py [--requests 2000] [--engine-ms 50] [--events 64] [--idle 1000] [--before REV]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

PROJECT = Path(__file__).resolve().parents[1]
SRC = PROJECT / "src"
sys.path.insert(0, str(SRC))
from sparkplay.nodetools.serve import gateway_tcp  # noqa: E402  (the clients' connector: see above)

REPLY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "391"}}], "model": "m"}).encode()
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "What is 17*23?"}], "max_tokens": 8})
TWO_SENDS = json.dumps({**json.loads(BODY), "model": "h"})


def two_sends_main(port_file: str) -> None:
    """The stand-in on Python's http.server: keep-alive, the answer's headers then its body, two sends."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Engine(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(REPLY)))
            self.end_headers()  # the headers' send
            self.wfile.write(REPLY)  # the body's

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    server.daemon_threads = True
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def engine_main(port_file: str, events: int) -> None:
    """The stand-in engine: `delay_ms` in the body says how long a completion takes; `stream` streams."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("delay_ms"):
            await asyncio.sleep(body["delay_ms"] / 1000)
        if not body.get("stream"):
            return web.Response(body=REPLY, content_type="application/json")
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(request)
        for i in range(events):
            await reply.write(f"data: {json.dumps({'choices': [{'delta': {'content': str(i)}}]})}\n\n".encode())
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        return reply

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        Path(port_file).write_text(str(site._server.sockets[0].getsockname()[1]))  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


def wait_port(path: Path, proc: subprocess.Popen[bytes]) -> int:
    for _ in range(200):
        if path.exists() and path.read_text():
            return int(path.read_text())
        if proc.poll() is not None:
            raise SystemExit(f"a process of the benchmark ended: {proc.returncode}")
        time.sleep(0.05)
    raise SystemExit("a process of the benchmark did not start")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def one(session: aiohttp.ClientSession, port: int, body: str) -> float:
    started = time.perf_counter()
    async with session.post(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    ) as reply:
        data = await reply.read()
    if reply.status != 200 or not (data.endswith(b"[DONE]\n\n") or data == REPLY):
        raise SystemExit(f"bad answer {reply.status}: {data[:200]!r}")
    return time.perf_counter() - started


async def side(port: int, body: str, requests: int, concurrency: int) -> dict[str, float]:
    connector = gateway_tcp.connector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(min(50, requests)):  # warm up: connections made, code paths hot
            await one(session, port, body)
        times: list[float] = []
        left = iter(range(requests))

        async def worker() -> None:
            for _ in left:
                times.append(await one(session, port, body))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    times.sort()
    return {
        "median_ms": round(statistics.median(times) * 1000, 3),
        "p95_ms": round(times[int(len(times) * 0.95)] * 1000, 3),
        "rps": round(requests / wall, 1),
    }


def compare(
    name: str, engine: int, gateway: int, body: str, requests: int, concurrency: int, direct: dict | None = None
) -> dict:
    direct = direct or asyncio.run(side(engine, body, requests, concurrency))
    through = asyncio.run(side(gateway, body, requests, concurrency))
    added = round(through["median_ms"] - direct["median_ms"], 3)
    ratio = round(through["rps"] / direct["rps"], 3)
    print(
        f"{name}: direct (baseline) median {direct['median_ms']} ms, p95 {direct['p95_ms']} ms, "
        f"{direct['rps']} req/s; through the gateway median {through['median_ms']} ms, p95 {through['p95_ms']} ms,"
        f" {through['rps']} req/s; added {added} ms a request, throughput {ratio}x",
        flush=True,
    )
    return {"direct": direct, "gateway": through, "added_median_ms": added, "throughput_ratio": ratio}


def with_idle(gateway: int, idle: int, requests: int) -> dict:
    quiet = asyncio.run(side(gateway, BODY, requests, 1))
    held = [socket.create_connection(("127.0.0.1", gateway)) for _ in range(idle)]
    try:
        busy = asyncio.run(side(gateway, BODY, requests, 1))
    finally:
        for sock in held:
            sock.close()
    delay = round(busy["median_ms"] - quiet["median_ms"], 3)
    print(
        f"with {idle} idle connections held on the gateway: median {busy['median_ms']} ms, p95 "
        f"{busy['p95_ms']} ms (without them {quiet['median_ms']} ms, p95 {quiet['p95_ms']} ms): {delay} ms later",
        flush=True,
    )
    return {"idle": idle, "without": quiet, "with": busy, "delay_median_ms": delay}


def start_gateway(src: Path, routes: Path, procs: list[subprocess.Popen[bytes]]) -> int:
    """`sparkplay-serve gateway` from the code under `src`, on a free port of its own."""
    port = free_port()
    code = "import sys; from sparkplay.nodetools.serve.cli import main; sys.exit(main())"
    cmd = [sys.executable, "-c", code, "gateway", "--routes", str(routes), "--listen", f"127.0.0.1:{port}"]
    procs.append(subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(src)}))
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return port
        except OSError:
            if procs[-1].poll() is not None:
                break
            time.sleep(0.05)
    raise SystemExit(f"the gateway from {src} did not start")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--engine-ms", type=float, default=50, help="a completion's time at concurrency 64")
    parser.add_argument("--events", type=int, default=64)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--before", help="a git revision whose gateway is measured too (the two-sends row)")
    parser.add_argument("--engine", choices=("aiohttp", "two-sends"), help=argparse.SUPPRESS)  # an engine's process
    parser.add_argument("--port-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine == "aiohttp":
        engine_main(args.port_file, args.events)
        return
    if args.engine == "two-sends":
        two_sends_main(args.port_file)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the idle connections, as the unit's LimitNOFILE
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 16384)), hard))
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        procs: list[subprocess.Popen[bytes]] = []
        stack.callback(stop, procs)
        ports = {}
        for kind in ("aiohttp", "two-sends"):
            port_file = Path(scratch) / f"port-{kind}"
            cmd = [sys.executable, __file__, "--engine", kind, "--port-file", str(port_file)]
            procs.append(subprocess.Popen([*cmd, "--events", str(args.events)]))
            ports[kind] = wait_port(port_file, procs[-1])
        routes = Path(scratch) / "routes.json"
        models = {"m": ports["aiohttp"], "h": ports["two-sends"]}
        routes.write_text(
            json.dumps({"models": {n: {"url": f"http://127.0.0.1:{p}", "recipe": "r"} for n, p in models.items()}})
        )
        routes.chmod(0o644)
        gateway_port = start_gateway(SRC, routes, procs)
        slow = json.dumps({**json.loads(BODY), "delay_ms": args.engine_ms})
        stream = json.dumps({**json.loads(BODY), "stream": True})
        engine_port = ports["aiohttp"]
        result = {
            "small completion, concurrency 1": compare(
                "small completion, concurrency 1", engine_port, gateway_port, BODY, args.requests, 1
            ),
            f"completion of {args.engine_ms:g} ms, concurrency 64": compare(
                f"completion of {args.engine_ms:g} ms, concurrency 64",
                engine_port,
                gateway_port,
                slow,
                args.requests * 2,
                64,
            ),
            f"stream of {args.events} events, concurrency 4": compare(
                f"stream of {args.events} events, concurrency 4",
                engine_port,
                gateway_port,
                stream,
                args.requests // 2,
                4,
            ),
            "idle connections": with_idle(gateway_port, args.idle, args.requests // 2),
        }
        name = "small completion, concurrency 1, the http.server stand-in (two sends)"
        result[name] = compare(name, ports["two-sends"], gateway_port, TWO_SENDS, args.requests, 1)
        if args.before:
            old = Path(scratch) / "before"
            git = ["git", "-C", str(PROJECT), "worktree"]
            subprocess.run([*git, "add", "--detach", str(old), args.before], check=True, capture_output=True)
            stack.callback(subprocess.run, [*git, "remove", "--force", str(old)], check=False)
            before_port = start_gateway(old / "src", routes, procs)
            requests = min(args.requests, 200)  # each may wait 40 ms
            result[f"{name}, gateway of {args.before}"] = compare(
                f"{name}, gateway of {args.before}",
                ports["two-sends"],
                before_port,
                TWO_SENDS,
                requests,
                1,
                direct=result[name]["direct"],
            )
    print(json.dumps({"requests": args.requests, "cores": os.cpu_count(), **result}))


if __name__ == "__main__":
    main()
