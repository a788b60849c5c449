"""The gateway's Prometheus metrics, per model (prometheus_client, from the gateway's pinned virtualenv):
requests by status, latency and time to first byte, loads on demand and their time, evictions, TTL stops
and requests waiting. Served at GET /metrics (behind the gateway's keys when it has some)."""

from __future__ import annotations

from typing import Any

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        labels = ("model",)
        self.requests = Counter(
            "sparkplay_gateway_requests", "Requests by model and status", ("model", "code"), registry=self.registry
        )
        self.latency = Histogram(
            "sparkplay_gateway_request_seconds",
            "From the request to the last byte",
            labels,
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.ttfb = Histogram(
            "sparkplay_gateway_first_byte_seconds",
            "From the request to the first byte",
            labels,
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.loads = Histogram(
            "sparkplay_gateway_load_seconds",
            "A model started on demand: asked to answering",
            labels,
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.evictions = Counter(
            "sparkplay_gateway_evictions", "Stopped to make room for another model", labels, registry=self.registry
        )
        self.expiries = Counter(
            "sparkplay_gateway_ttl_stops", "Stopped after idling past the TTL", labels, registry=self.registry
        )
        self.waiting = Gauge(
            "sparkplay_gateway_queue_depth", "Requests waiting for their model to load", labels, registry=self.registry
        )

    def answered(self, model: str, code: int, first_byte_s: float, total_s: float) -> None:
        self.requests.labels(model, str(code)).inc()
        self.ttfb.labels(model).observe(first_byte_s)
        self.latency.labels(model).observe(total_s)

    def loaded(self, model: str, seconds: float) -> None:
        self.loads.labels(model).observe(seconds)

    def evicted(self, model: str) -> None:
        self.evictions.labels(model).inc()

    def expired(self, model: str) -> None:
        self.expiries.labels(model).inc()

    def queue(self, model: str, depth: int) -> None:
        self.waiting.labels(model).set(depth)

    def text(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class NoMetrics:
    """Where prometheus_client is missing (a gateway run outside its virtualenv): the same calls, no counts."""

    def __getattr__(self, _: str) -> Any:
        return lambda *args, **kwargs: None

    def text(self) -> tuple[bytes, str]:
        return b"# prometheus_client is not installed for this gateway\n", "text/plain; version=0.0.4"


def make() -> Metrics | NoMetrics:
    try:
        return Metrics()
    except ImportError:
        return NoMetrics()
