"""Prometheus metrics of the projector, and an endpoint for the commands without an HTTP API.

``convlog serve`` exposes these at ``/metrics`` with the API's own. ``convlog project`` and
``convlog summarize`` (the processes a Kafka deployment scales out) serve their registry on
``CONVLOG_METRICS_HOST:CONVLOG_METRICS_PORT`` (default host 127.0.0.1; no port, no endpoint).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from convlog.settings import Settings
from events.errors import ConfigurationError
from projectors.runner import LATENCY_BUCKETS, ProjectorStats

log = structlog.get_logger(__name__)


class _ProjectorView(Protocol):
    @property
    def ready(self) -> bool: ...

    @property
    def positions(self) -> Mapping[int, int]: ...

    @property
    def stats(self) -> ProjectorStats: ...


class ProjectorCollector(Collector):
    """Reads the projector's own counters at scrape time: nothing on the hot path."""

    def __init__(self, projector: _ProjectorView) -> None:
        self._projector = projector

    def collect(self) -> Iterator[Metric]:
        stats = self._projector.stats
        for name, value, doc in (
            ("applied", stats.applied, "Events applied to the read models"),
            ("duplicates", stats.duplicates, "Events skipped as already applied (same event id)"),
            ("dead_lettered", stats.dead_lettered, "Records put in dead letters"),
            ("held", stats.held, "Records held behind a parked conversation"),
            ("batches", stats.batches, "Batches committed"),
            ("store_retries", stats.store_retries, "Retries while Postgres was unavailable"),
        ):
            yield CounterMetricFamily(f"convlog_projector_{name}", doc, value=value)
        ready = GaugeMetricFamily("convlog_projector_ready", "1 when positions are loaded and Postgres answers")
        ready.add_metric([], 1.0 if self._projector.ready else 0.0)
        yield ready
        latency = stats.latency
        cumulative = list(itertools.accumulate(latency.counts))
        yield HistogramMetricFamily(
            "convlog_projection_latency_seconds",
            "Per committed batch: the age of its oldest record (log timestamp to commit)",
            buckets=[
                ("+Inf" if math.isinf(b) else str(b), c) for b, c in zip(LATENCY_BUCKETS, cumulative, strict=True)
            ],
            sum_value=latency.total_s,
        )
        positions = GaugeMetricFamily("convlog_projector_position", "Next offset to apply", labels=["partition"])
        for partition, offset in sorted(self._projector.positions.items()):
            positions.add_metric([str(partition)], offset)
        yield positions


def start_metrics_endpoint(registry: CollectorRegistry, settings: Settings) -> bool:
    """Serve ``registry`` over HTTP (a daemon thread) when ``CONVLOG_METRICS_PORT`` is set."""
    port, host = settings.metrics_port, settings.metrics_host
    if not port:
        return False
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {e}") from e
    log.info("metrics.serving", host=host, port=port)
    return True
