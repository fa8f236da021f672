"""The event topic's settings: what convlog gives a topic it creates, and which settings of an
existing topic would lose events.

The log is the source of truth — rebuilds, ``as_of`` and audits read it from offset 0 — so a
topic that deletes or compacts records silently takes history away from every read model that
is rebuilt later. convlog never alters an existing topic (its owner may have reasons, and a
producer in another language may have created it first); it says at start what is at risk.
Pure functions: the Kafka adapter describes the topic and logs what these return.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The settings that decide whether an acknowledged event stays in the log for good.
CHECKED_SETTINGS = ("retention.ms", "retention.bytes", "cleanup.policy", "min.insync.replicas")


def new_topic_configs(replicas: int) -> dict[str, str]:
    """The configs of a topic convlog creates: keep every record forever, never compact, and
    make ``acks=all`` mean two copies whenever there are two replicas."""
    return {
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "cleanup.policy": "delete",  # explicit: a broker default of "compact" must not apply
        "min.insync.replicas": str(min(2, replicas)),
    }


@dataclass(frozen=True, slots=True)
class TopicRisk:
    """One setting of an existing topic that can lose events."""

    setting: str
    value: str
    risk: str
    safe_value: str


def topic_risks(configs: Mapping[str, str], *, replicas: int) -> list[TopicRisk]:
    """What in ``configs`` (a topic's effective settings) can lose events; settings missing
    from ``configs`` are not judged."""
    risks: list[TopicRisk] = []
    retention_ms = _int(configs.get("retention.ms"))
    if retention_ms is not None and retention_ms >= 0:
        risks.append(
            TopicRisk(
                "retention.ms",
                str(retention_ms),
                f"events older than {_duration(retention_ms)} are deleted: rebuilds, as_of and audits lose them",
                "-1",
            )
        )
    retention_bytes = _int(configs.get("retention.bytes"))
    if retention_bytes is not None and retention_bytes >= 0:
        risks.append(
            TopicRisk(
                "retention.bytes",
                str(retention_bytes),
                f"a partition's oldest events are deleted once it holds more than {retention_bytes} bytes",
                "-1",
            )
        )
    policy = configs.get("cleanup.policy")
    if policy is not None and "compact" in {p.strip() for p in policy.split(",")}:
        risks.append(
            TopicRisk(
                "cleanup.policy",
                policy,
                "compaction keeps only the newest record per key, and the key is the conversation: "
                "all but its last event go",
                "delete",
            )
        )
    min_isr = _int(configs.get("min.insync.replicas"))
    if min_isr is not None and min_isr < 2 <= replicas:
        risks.append(
            TopicRisk(
                "min.insync.replicas",
                str(min_isr),
                f"acks=all is satisfied by {min_isr} of {replicas} replicas: losing that broker loses "
                "acknowledged events",
                "2",
            )
        )
    return risks


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _duration(ms: int) -> str:
    for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000), ("seconds", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"
