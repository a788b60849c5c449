"""The gateway's process: its arguments, its serving loop and stop, and a thread of its own for tests and
benchmarks (the request handling itself: gateway.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from .gateway import Gateway, _journal
from .gateway_files import Keys, Routes, UpstreamKeys
from .gateway_server import capped_server, one_line_logger


async def serve(args: argparse.Namespace, ready: Callable[[], None] | None = None) -> None:
    gateway = Gateway(
        Routes(Path(args.routes)),
        Keys(Path(args.keys)) if args.keys else None,
        UpstreamKeys(Path(args.upstream_keys) if args.upstream_keys else None),
        max_body=args.max_body,
        body_budget=args.body_budget,
        body_timeout=args.body_timeout,
        timeout_s=args.timeout,
        node=args.node,
    )
    gateway.routes.current(force=True)
    gateway.demand.swapper = args.swapper
    gateway.fabric_env = Path(args.fabric_env) if args.fabric_env else None  # the cluster page's twins
    await gateway.start()
    tending = asyncio.get_running_loop().create_task(gateway.tend(Path(args.state) if args.state else None))
    server = capped_server()(
        args.max_connections,
        gateway.handle,
        keepalive_timeout=args.idle_timeout,
        access_log=None,
        logger=one_line_logger(),
        max_line_size=8190,
        max_field_size=8190,
        max_headers=100,
    )

    host, _, port = args.listen.rpartition(":")
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(server, host.strip("[]"), int(port), backlog=args.backlog, reuse_address=True)
    args.bound = listener.sockets[0].getsockname()[:2]
    stop = asyncio.Event()
    for sig, act in ((signal.SIGHUP, lambda: gateway.routes.current(force=True)), (signal.SIGTERM, stop.set)):
        with contextlib.suppress(RuntimeError, ValueError):  # not the main thread (tests run it beside theirs)
            loop.add_signal_handler(sig, act)
    args.stop = stop
    if ready is not None:
        ready()
    try:
        await stop.wait()
    finally:
        tending.cancel()
        listener.close()
        await server.shutdown(args.grace)
        await gateway.close()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--routes", required=True, help="the routes file: served name -> deployment URL (JSON)")
    p.add_argument("--listen", required=True, help="ADDR:PORT (the serve role's serve_gateway_bind and _port)")
    p.add_argument("--keys", help="a file of the keys clients must present (Bearer); none: no key asked")
    p.add_argument("--upstream-keys", help="a folder of each deployment's own key (SLOT.key, @primary.key)")
    p.add_argument("--max-body", type=int, default=16 << 20, help="bytes of one request's body at most")
    p.add_argument("--body-budget", type=int, default=256 << 20, help="bytes of all bodies held at once")
    p.add_argument("--max-connections", type=int, default=4096)
    p.add_argument("--backlog", type=int, default=1024)
    p.add_argument("--idle-timeout", type=float, default=15, help="seconds for a request's headers to arrive")
    p.add_argument("--body-timeout", type=float, default=60, help="seconds for a request's body to arrive")
    p.add_argument("--timeout", type=float, default=900, help="seconds an upstream may stay silent")
    p.add_argument("--swapper", help="the swapper's socket (starts and stops models served on demand)")
    p.add_argument("--state", help="a file the gateway keeps each model's state in (status reads it)")
    p.add_argument("--grace", type=float, default=10, help="seconds requests in flight get to end at a stop")
    p.add_argument(
        "--node", help="this node's inventory name: the watchdog states of the deployments it leads are read here"
    )
    p.add_argument("--fabric-env", help="the fabric role's env file (names the cable's twins, for the page)")


def cmd_gateway(args: argparse.Namespace) -> int:
    try:
        import aiohttp  # noqa: F401  (the gateway's one dependency: its virtualenv has it)
    except ImportError:
        _journal(
            "aiohttp is not installed for this Python: run the gateway from its virtualenv "
            "(the serve role installs it: /opt/sparkplay/gateway)"
        )
        return 2
    socket.setdefaulttimeout(None)
    asyncio.run(serve(args))
    return 0


def in_thread(argv: list[str]) -> tuple[tuple[str, int], Callable[[], None]]:
    """The gateway serving on a thread of its own (tests and benchmarks/gateway.py): its address, and a stop."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(argv)
    loop = asyncio.new_event_loop()
    up = threading.Event()
    thread = threading.Thread(target=lambda: loop.run_until_complete(serve(args, up.set)), daemon=True)
    thread.start()
    if not up.wait(10):
        raise RuntimeError("the gateway did not start")

    def stop() -> None:
        loop.call_soon_threadsafe(args.stop.set)
        thread.join(10)

    return args.bound, stop
