"""The soak's load: a bounded stream of requests through the gateway on the lab's leader, every one recorded.

Requests go from rank 0's own loopback (`docker exec ... curl`), where the gateway listens: nothing leaves the
lab, and a request made while rank 0 is down fails as a client there would. The rate is steady with bursts;
the mix is chat and completions, streamed and not, over every model the soak serves, with the models on demand
taking turns (so the gateway swaps them). A request succeeds when it is answered 200 with a whole answer (a
JSON body with choices, or a stream that ends with `data: [DONE]`).
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from sparkplay.lab.dockercli import docker_binary
from sparkplay.lab.manager import container_name

GATEWAY = "http://127.0.0.1:9930/v1"
# curl's own figures after the body: status, first byte and total seconds, bytes received
WRITE_OUT = "\n%{http_code} %{time_starttransfer} %{time_total} %{size_download}"


@dataclass
class Request:
    start: float  # unix time the request was sent
    model: str
    api: str  # "chat" or "completion"
    stream: bool
    status: int  # HTTP status; 0: no answer at all (the node, the gateway or the connection was away)
    latency_s: float
    first_byte_s: float
    bytes: int
    ok: bool
    error: str = ""


def body(model: str, api: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": 4, "temperature": 0, "stream": stream}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "What is 17*23?"}]
    else:
        body["prompt"] = "17*23 ="
    return body


def whole(text: str, stream: bool) -> bool:
    """An answer, not only a status: a stream that ended, or a body with choices."""
    if stream:
        return text.rstrip().endswith("data: [DONE]")
    try:
        return bool(json.loads(text).get("choices"))
    except (ValueError, AttributeError):
        return False


def send(model: str, api: str, stream: bool, timeout: float) -> Request:
    """One request through the gateway from rank 0's loopback, recorded whatever happens."""
    path = "chat/completions" if api == "chat" else "completions"
    started, clock = time.time(), time.monotonic()
    argv = [docker_binary(), "exec", container_name(0), "curl", "-sS", "-N", "-m", str(int(timeout))]
    argv += ["-H", "Content-Type: application/json", "-d", json.dumps(body(model, api, stream))]
    argv += ["-w", WRITE_OUT, f"{GATEWAY}/{path}"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 15, check=False)
        out, err = proc.stdout, proc.stderr.strip()
    except subprocess.TimeoutExpired:
        out, err = "", f"no answer within {timeout + 15:.0f} s"
    text, _, figures = out.rpartition("\n")
    try:
        code, first, total, size = figures.split()
        status, first_s, total_s, nbytes = int(code), float(first), float(total), int(float(size))
    except ValueError:  # docker exec itself failed: the node is away
        status, first_s, total_s, nbytes = 0, 0.0, time.monotonic() - clock, 0
        err = err or figures.strip() or "no answer"
    ok = status == 200 and whole(text, stream)
    if not ok and not err:
        err = text.strip().splitlines()[-1][:200] if text.strip() else f"HTTP {status}"
    return Request(started, model, api, stream, status, round(total_s, 3), round(first_s, 3), nbytes, ok, err[:200])


class Load:
    """Requests at `rate` a second (and a burst of `burst` at once every `burst_every` s) until stopped.

    `steady` models are always on; `on_demand` ones take turns, one at a time for `turn_s` seconds, so the
    gateway starts one and stops the other at each turn (a swap)."""

    def __init__(
        self,
        steady: list[str],
        on_demand: list[str],
        *,
        seed: int,
        rate: float = 1.0,
        burst: int = 6,
        burst_every: float = 120,
        turn_s: float = 30,
        timeout: float = 60,
        workers: int = 12,
        sender: Callable[[str, str, bool, float], Request] | None = None,
    ) -> None:
        self.steady, self.on_demand = steady, on_demand
        self.send = sender or send  # the lab's: from rank 0's loopback
        self.rng = random.Random(seed)  # noqa: S311 - a repeatable mix, not a secret
        self.rate, self.burst, self.burst_every, self.turn_s, self.timeout = rate, burst, burst_every, turn_s, timeout
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="soak-load")
        self._thread = threading.Thread(target=self._run, name="soak-schedule", daemon=True)

    def _pick(self, elapsed: float) -> str:
        if self.on_demand and self.rng.random() < 0.4:
            return self.on_demand[int(elapsed // self.turn_s) % len(self.on_demand)]
        return self.rng.choice(self.steady)

    def _one(self, model: str) -> None:
        api = self.rng.choice(("chat", "completion"))
        request = self.send(model, api, self.rng.random() < 0.5, self.timeout)
        with self._lock:
            self.requests.append(request)

    def _run(self) -> None:
        begun = time.monotonic()
        next_burst = begun + self.burst_every
        while not self._stop.wait(1 / self.rate):
            elapsed = time.monotonic() - begun
            count = 1
            if time.monotonic() >= next_burst:
                count, next_burst = self.burst, next_burst + self.burst_every
            for _ in range(count):
                self._pool.submit(self._one, self._pick(elapsed))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        """Stop sending, wait for what is in flight, and give every request as data (in order sent)."""
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)
        with self._lock:
            return [asdict(r) for r in sorted(self.requests, key=lambda r: r.start)]
