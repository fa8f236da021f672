"""The projector's metrics as Prometheus sees them (no servers: the collector reads stats)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, generate_latest

from convlog.runtime.metrics_server import ProjectorCollector
from projectors.runner import ProjectorStats


class _View:
    def __init__(self, stats: ProjectorStats) -> None:
        self.stats = stats
        self.ready = True
        self.positions: Mapping[int, int] = {0: 5}


def test_projection_latency_is_a_histogram_of_each_batch_oldest_record_age() -> None:
    stats = ProjectorStats()
    for seconds in (0.003, -1.0, 0.2, 0.2, 7.0, 1e6):  # -1: a producer clock ahead of ours counts as 0
        stats.latency.observe(seconds)
    registry = CollectorRegistry()
    registry.register(ProjectorCollector(_View(stats)))
    text = generate_latest(registry).decode()
    for bound, count in (("0.01", 2), ("0.25", 4), ("5.0", 4), ("10.0", 5), ("300.0", 5), ("+Inf", 6)):
        assert f'convlog_projection_latency_seconds_bucket{{le="{bound}"}} {count}.0' in text, (bound, text)
    assert "convlog_projection_latency_seconds_count 6.0" in text
    assert 'convlog_projector_position{partition="0"} 5.0' in text
