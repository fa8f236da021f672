"""The summarizer's Prometheus metrics, on the registry the process exposes at /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class SummarizerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry or CollectorRegistry()
        self.recorded = Counter("convlog_summaries_recorded", "SummaryRecorded events appended", registry=registry)
        self.llm_seconds = Histogram(
            "convlog_summary_llm_seconds",
            "Latency of summary model calls that answered",
            registry=registry,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.llm_tokens = Counter(
            "convlog_summary_llm_tokens", "Tokens the summary model reported", ["direction"], registry=registry
        )
        self.failures = Counter(
            "convlog_summary_failures", "Summaries that failed, by error code", ["code"], registry=registry
        )
