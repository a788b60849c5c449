"""`drain`: wait until the gateway routes a model to its new API and holds no request on the one it left.

The gateway keeps, in its state file (rewritten within a second of any change), the API each served name is
routed to and each API's requests in flight, counted from the moment a request's route is chosen. Once the
state says the model's route is the new one and the old API holds nothing, no request can reach the old API
any more: the deployment behind it may stop without a request failing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

# a gateway that keeps no state this long after the wait began is not running: nothing goes through it
NO_STATE_S = 5.0


def _state(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def drained(doc: dict[str, Any], model: str, to: str, old: str) -> tuple[bool, int]:
    """Whether `doc` (the gateway's state) routes `model` to `to` with nothing in flight on `old`."""
    routes = doc.get("routes") if isinstance(doc.get("routes"), dict) else {}
    upstreams = doc.get("upstreams") if isinstance(doc.get("upstreams"), dict) else {}
    held = upstreams.get(old, 0)
    held = held if isinstance(held, int) else 0
    return routes.get(model) == to and held == 0, held


def cmd_drain(args: argparse.Namespace) -> int:
    started = time.monotonic()
    held = 0
    while True:
        waited = time.monotonic() - started
        doc = _state(Path(args.state))
        if doc is None and waited >= NO_STATE_S:
            return _say(True, waited, 0, "the gateway keeps no state (it is not running): nothing is in flight")
        if doc is not None:
            done, held = drained(doc, args.model, args.to, args.old)
            if done:
                return _say(True, waited, 0, f"{args.model} is routed to {args.to}; nothing is in flight on {args.old}")
        if waited >= args.timeout:
            return _say(False, waited, held, f"{held} request(s) in flight on {args.old} after {args.timeout:g} s")
        time.sleep(args.interval)


def _say(done: bool, waited: float, held: int, why: str) -> int:
    print(json.dumps({"drained": done, "seconds": round(waited, 1), "in_flight": held, "why": why}))
    return 0 if done else 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", required=True, help="the gateway's state file")
    p.add_argument("--model", required=True, help="the served name whose route moved")
    p.add_argument("--to", required=True, help="the API it is routed to now")
    p.add_argument("--from", dest="old", required=True, help="the API it left")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--interval", type=float, default=0.2)
