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
Clients keep their connections (as OpenAI's clients do). The last line is JSON.

    python benchmarks/gateway.py [--requests 2000] [--engine-ms 50] [--events 64] [--idle 1000]
"""

from __future__ import annotations

import argparse
import asyncio
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

SRC = Path(__file__).resolve().parents[1] / "src"
REPLY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "391"}}], "model": "m"}).encode()
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "What is 17*23?"}], "max_tokens": 8})


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
    connector = aiohttp.TCPConnector(limit=concurrency)
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


def compare(name: str, engine: int, gateway: int, body: str, requests: int, concurrency: int) -> dict:
    direct = asyncio.run(side(engine, body, requests, concurrency))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--engine-ms", type=float, default=50, help="a completion's time at concurrency 64")
    parser.add_argument("--events", type=int, default=64)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--engine", action="store_true", help=argparse.SUPPRESS)  # the engine's own process
    parser.add_argument("--port-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        engine_main(args.port_file, args.events)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the idle connections, as the unit's LimitNOFILE
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 16384)), hard))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with tempfile.TemporaryDirectory() as scratch:
        port_file, routes = Path(scratch) / "port", Path(scratch) / "routes.json"
        engine = subprocess.Popen(
            [sys.executable, __file__, "--engine", "--port-file", str(port_file), "--events", str(args.events)], env=env
        )
        gateway = None
        try:
            engine_port = wait_port(port_file, engine)
            routes.write_text(json.dumps({"models": {"m": {"url": f"http://127.0.0.1:{engine_port}", "recipe": "r"}}}))
            routes.chmod(0o644)
            gateway_port = free_port()
            gateway = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from sparkplay.nodetools.serve.cli import main; sys.exit(main())",
                    "gateway",
                    "--routes",
                    str(routes),
                    "--listen",
                    f"127.0.0.1:{gateway_port}",
                ],
                env=env,
            )
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", gateway_port)).close()
                    break
                except OSError:
                    time.sleep(0.05)
            slow = json.dumps({**json.loads(BODY), "delay_ms": args.engine_ms})
            stream = json.dumps({**json.loads(BODY), "stream": True})
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
        finally:
            for proc in (engine, gateway):
                if proc is not None:
                    proc.terminate()
                    proc.wait(10)
    print(json.dumps({"requests": args.requests, "cores": os.cpu_count(), **result}))


if __name__ == "__main__":
    main()
