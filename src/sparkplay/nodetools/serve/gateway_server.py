"""The gateway's connections and log: at most a cap of connections (asyncio hands one above it a 503 before
aiohttp sees it), and aiohttp's log of a refused request as one journal line."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: 115\r\n\r\n"
    b'{"error": {"message": "the gateway holds as many connections as it may", '
    b'"type": "api_error", "code": "overloaded"}}'
)


class _OneLine(logging.Logger):
    """aiohttp's log of a refused request as one journal line, without its traceback: a client that sends
    bad requests on purpose gets no page of the journal for each."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        error = sys.exc_info()[1]
        self.error(
            f"{msg} ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})", *args, **kwargs
        )


class _Busy(asyncio.Protocol):
    """What a connection above the cap gets: one 503 and the door."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(BUSY)  # type: ignore[attr-defined]
        transport.close()


def capped_server() -> type:
    from aiohttp import web

    class Capped(web.Server):
        """aiohttp's server, counting connections as it takes them (asyncio may accept a batch before any is
        registered), and answering 503 above the cap."""

        def __init__(self, cap: int, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.cap, self.open = cap, 0

        def __call__(self) -> Any:
            if self.open >= self.cap:
                return _Busy()
            self.open += 1
            return super().__call__()

        def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
            self.open -= 1
            super().connection_lost(handler, exc)

    return Capped


def one_line_logger() -> logging.Logger:
    logger = _OneLine("sparkplay-gateway")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sparkplay-gateway: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    return logger
