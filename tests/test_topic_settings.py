"""Which settings of an existing event topic can lose events (the rules behind the start-up
warnings; tests/kafka/test_topic_settings.py checks them on a real broker)."""

from __future__ import annotations

import pytest

from events.topic_settings import new_topic_configs, topic_risks

SAFE = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete", "min.insync.replicas": "2"}


def settings(**changes: str) -> dict[str, str]:
    return {**SAFE, **{k.replace("_", "."): v for k, v in changes.items()}}


def risky(configs: dict[str, str], replicas: int = 3) -> dict[str, str]:
    return {r.setting: r.safe_value for r in topic_risks(configs, replicas=replicas)}


def test_the_settings_of_a_new_topic_are_safe_for_any_replica_count() -> None:
    for replicas in (1, 2, 3, 5):
        assert topic_risks(new_topic_configs(replicas), replicas=replicas) == []
    assert new_topic_configs(1)["min.insync.replicas"] == "1"
    assert new_topic_configs(3)["min.insync.replicas"] == "2"


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        (settings(retention_ms="604800000"), {"retention.ms": "-1"}),
        (settings(retention_ms="0"), {"retention.ms": "-1"}),
        (settings(retention_bytes="1073741824"), {"retention.bytes": "-1"}),
        (settings(cleanup_policy="compact"), {"cleanup.policy": "delete"}),
        (settings(cleanup_policy="delete, compact"), {"cleanup.policy": "delete"}),
        (settings(min_insync_replicas="1"), {"min.insync.replicas": "2"}),
        (
            settings(retention_ms="86400000", cleanup_policy="compact"),
            {"retention.ms": "-1", "cleanup.policy": "delete"},
        ),
    ],
)
def test_settings_that_lose_events_are_named_with_the_safe_value(
    configs: dict[str, str], expected: dict[str, str]
) -> None:
    assert risky(configs) == expected


def test_one_in_sync_replica_is_only_a_risk_when_there_are_more_replicas() -> None:
    assert risky(settings(min_insync_replicas="1"), replicas=1) == {}
    assert risky(settings(min_insync_replicas="1"), replicas=2) == {"min.insync.replicas": "2"}


def test_the_risk_says_how_long_events_are_kept() -> None:
    [risk] = topic_risks(settings(retention_ms="604800000"), replicas=1)
    assert "7 days" in risk.risk
    [risk] = topic_risks(settings(retention_ms="5400000"), replicas=1)
    assert "90 minutes" in risk.risk


def test_unknown_or_missing_values_are_not_judged() -> None:
    assert topic_risks({}, replicas=3) == []
    assert topic_risks({"retention.ms": "soon"}, replicas=3) == []
