"""Prometheus metrics (prometheus_client, the library Prometheus users expect)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    """One registry per process (tests create their own)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "convlog_http_requests", "HTTP requests", ["route", "method", "status"], registry=self.registry
        )
        self._latency = Histogram("convlog_http_request_seconds", "HTTP request latency", ["route"],
                                  registry=self.registry)  # fmt: skip
        self._context_tokens = Histogram(
            "convlog_context_tokens", "Prompt tokens of served contexts", registry=self.registry,
            buckets=(256, 1024, 4096, 16384, 65536, 262144),
        )  # fmt: skip
        self.projection_lag = Gauge("convlog_projection_lag", "Records not yet projected", ["partition"],
                                    registry=self.registry)  # fmt: skip
        self.dead_letters = Gauge("convlog_dead_letters", "Records dead-lettered by this process",
                                  registry=self.registry)  # fmt: skip
        self.content_type = CONTENT_TYPE_LATEST

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        self._requests.labels(route, method, str(status)).inc()
        self._latency.labels(route).observe(seconds)

    def context_served(self, tokens: int) -> None:
        self._context_tokens.observe(tokens)

    def render(self) -> str:
        return generate_latest(self.registry).decode()
