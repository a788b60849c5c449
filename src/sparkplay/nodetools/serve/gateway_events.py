"""The gateway's own journal lines, also kept in memory (the last 200, each with its time) for the cluster
page's timeline: starts and stops on demand, evictions, TTL stops, deployments that cannot answer and why."""

from __future__ import annotations

import sys
import time
from collections import deque

EVENTS: deque[tuple[float, str]] = deque(maxlen=200)


def say(line: str) -> None:
    """One line to the journal (stderr, which systemd keeps) and to the page's timeline."""
    print(f"sparkplay-gateway: {line}", file=sys.stderr, flush=True)
    EVENTS.append((time.time(), line))


def recent(count: int = 50) -> list[dict[str, object]]:
    """The newest `count` events, newest first."""
    return [{"at": at, "what": what} for at, what in reversed(list(EVENTS)[-count:])]
