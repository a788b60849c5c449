"""The gateway's connections to the engines: pooled, and acknowledging what arrives at once.

Why: an engine that writes its answer's headers and body in two sends (Python's own `http.server` does, and
so may any engine that leaves Nagle's algorithm on) holds the body until the headers are acknowledged, and
Linux delays that acknowledgement up to 40 ms on a connection in its interactive mode, which a pooled
connection is after its first request. Measured: a pooled request to such an engine took 44 ms, 0.27 ms
with this (docs/benchmarks.md, the gateway). Direct clients that open a connection per request never
see it, which is why a gateway that pools must. TCP_QUICKACK is not sticky on Linux: it is set again each
time data arrives, which also sends an acknowledgement that is pending (one system call per read).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from typing import Any

QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux's; elsewhere the delay is the OS's own


def _quick_handler() -> type:
    from aiohttp.client_proto import ResponseHandler

    class QuickAck(ResponseHandler):
        """aiohttp's client protocol, acknowledging each arrival at once."""

        _sock: socket.socket | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            self._sock = sock if QUICKACK is not None and sock is not None else None

        def data_received(self, data: bytes) -> None:
            if data and self._sock is not None:
                try:
                    self._sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)  # type: ignore[arg-type]
                except OSError:  # closing under us: the read below says so
                    self._sock = None
            super().data_received(data)

    return QuickAck


def connector(**kwargs: Any) -> Any:
    """aiohttp's TCPConnector (kwargs as its own) whose connections acknowledge at once.

    aiohttp has no public hook for its client protocol; its connector keeps the factory in `_factory`
    (aiohttp is pinned by hash in roles/serve/files/gateway.lock, and tests/test_gateway.py fails if the
    attribute moves)."""
    import aiohttp

    made = aiohttp.TCPConnector(**kwargs)
    if not hasattr(made, "_factory"):
        raise RuntimeError("aiohttp's TCPConnector has no _factory: gateway_tcp needs updating for this aiohttp")
    made._factory = functools.partial(_quick_handler(), loop=made._loop)  # private: see the docstring
    return made
