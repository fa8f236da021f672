"""Prometheus metrics (prometheus_client, the library Prometheus users expect)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class ErasureMetrics:
    """Erasures and the keys they destroyed, counted where they are made: the API's routes and
    ``convlog erase`` (each process its own registry; docs/erasure.md, Metrics). An erase that
    finds its subject erased already (``already``) is not counted: it erased nothing."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._erasures = Counter(
            "convlog_erasures_total", "Erasures made, by subject (user or conversation)", ["subject"], registry=registry
        )
        self._keys = Counter("convlog_keys_destroyed_total", "Data keys destroyed by erasures", registry=registry)
        for subject in ("user", "conversation"):
            self._erasures.labels(subject)  # both series exist from the start, at 0

    def erased(self, subject: str, *, destroyed_keys: int, already: bool = False) -> None:
        if not already:
            self._erasures.labels(subject).inc()
        self._keys.inc(destroyed_keys)

    def add(self, subject: str, erasures: float, destroyed_keys: float) -> None:
        """Counts carried over from an earlier process (``convlog erase --metrics-file``)."""
        self._erasures.labels(subject).inc(erasures)
        self._keys.inc(destroyed_keys)


class Metrics:
    """One registry per process (tests create their own)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "convlog_http_requests", "HTTP requests", ["route", "method", "status"], registry=self.registry
        )
        self._latency = Histogram(
            "convlog_http_request_seconds", "HTTP request latency", ["route"], registry=self.registry
        )
        self._context_tokens = Histogram(
            "convlog_context_tokens",
            "Prompt tokens of served contexts",
            registry=self.registry,
            buckets=(256, 1024, 4096, 16384, 65536, 262144),
        )
        # What the window and summary policy does to a user's bill: providers charge a repeated
        # prefix at a fraction of the price (query_api/cache_prefix.py).
        self._prefix_tokens = Counter(
            "convlog_context_cacheable_prefix_tokens_total",
            "Leading tokens of served contexts equal to the previous context's",
            ["format"],
            registry=self.registry,
        )
        self._prefix_total = Counter(
            "convlog_context_compared_tokens_total",
            "Tokens of served contexts that had a previous one to compare with",
            ["format"],
            registry=self.registry,
        )
        # Read-your-writes: how long a context asked for with ``min_offset`` waited for the projection
        # to make that append readable (0 when it already was) -- the wait an app adds to a turn.
        self._freshness = Histogram(
            "convlog_freshness_seconds",
            "Wait of a min_offset context until the projection applied the offset",
            registry=self.registry,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0),
        )
        self.projection_lag = Gauge(
            "convlog_projection_lag", "Records not yet projected", ["partition"], registry=self.registry
        )
        self.dead_letters = Gauge(
            "convlog_dead_letters", "Records dead-lettered by this process", registry=self.registry
        )
        self.erasures = ErasureMetrics(self.registry)
        self.content_type = CONTENT_TYPE_LATEST
        # Each request's labelled children, looked up once: labels() takes a lock and checks the
        # values every time (~3 us each, twice a request). Bounded: route templates x methods x statuses.
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._prefix_children: dict[str, tuple[Any, Any]] = {}

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        children = self._request_children.get((route, method, status))
        if children is None:
            children = self._request_children[route, method, status] = (
                self._requests.labels(route, method, str(status)),
                self._latency.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)

    def context_served(self, tokens: int) -> None:
        self._context_tokens.observe(tokens)

    def freshness(self, seconds: float) -> None:
        self._freshness.observe(seconds)

    def cacheable_prefix(self, fmt: str, *, prefix: int, tokens: int) -> None:
        """A context with ``prefix`` of its ``tokens`` equal to the previous one's: the two
        counters' ratio is the share of prompt tokens a provider's cache could serve."""
        children = self._prefix_children.get(fmt)
        if children is None:
            children = self._prefix_children[fmt] = (self._prefix_tokens.labels(fmt), self._prefix_total.labels(fmt))
        children[0].inc(prefix)
        children[1].inc(tokens)

    def render(self) -> str:
        return generate_latest(self.registry).decode()
