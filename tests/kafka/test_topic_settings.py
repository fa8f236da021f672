"""The event topic on a real broker: the settings convlog gives a topic it creates (those
docs/producers.md lists), and the warnings at start for an existing topic whose settings would
lose events (which convlog keeps)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from structlog.testing import capture_logs

from events.kafka_log import KafkaEventLog
from events.topic_settings import CHECKED_SETTINGS
from tests.producer_doc import topic_settings
from tests.support import unique_topic

pytestmark = pytest.mark.kafka

SEVEN_DAYS_MS = "604800000"  # the broker's default (log.retention.hours=168) for topics it auto-creates


@asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's effective values of the settings convlog cares about, as the broker reports them."""
    async with admin_client(bootstrap) as admin:
        wanted = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict.fromkeys(CHECKED_SETTINGS))
        [response] = await admin.describe_configs([wanted])
    [resource] = response.to_object()["resources"]
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


async def create_foreign_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str]) -> None:
    """A topic made before convlog ran, e.g. by a producer whose broker auto-creates topics."""
    async with admin_client(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])


async def connect_capturing(bootstrap: str, topic: str, partitions: int) -> tuple[KafkaEventLog, list[dict[str, Any]]]:
    with capture_logs() as logs:
        log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=partitions)
    return log, logs


def warnings_about_settings(logs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["setting"]: e for e in logs if e["event"] == "kafka_log.topic_setting_loses_events"}


async def test_a_topic_convlog_creates_keeps_every_event_and_starts_without_warnings(kafka_bootstrap: str) -> None:
    topic = unique_topic()
    log, logs = await connect_capturing(kafka_bootstrap, topic, 5)
    try:
        assert log.partition_count == 5
        documented = topic_settings()  # docs/producers.md, "The topic"
        replicas = "1"  # min(2, replicas) on this single-broker cluster
        assert await topic_configs(kafka_bootstrap, topic) == {
            k: replicas if v == "min(2, replicas)" else v for k, v in documented.items()
        }
        assert documented["retention.ms"] == documented["retention.bytes"] == "-1"
        assert [e for e in logs if e["log_level"] == "warning"] == []
    finally:
        await log.close()


async def test_an_auto_created_topic_with_seven_day_retention_is_kept_and_warned_about(kafka_bootstrap: str) -> None:
    topic = unique_topic()
    await create_foreign_topic(kafka_bootstrap, topic, 1, {"retention.ms": SEVEN_DAYS_MS})
    log, logs = await connect_capturing(kafka_bootstrap, topic, 12)
    try:
        warned = warnings_about_settings(logs)
        assert set(warned) == {"retention.ms"}
        assert warned["retention.ms"]["topic"] == topic
        assert warned["retention.ms"]["value"] == SEVEN_DAYS_MS
        assert "7 days" in warned["retention.ms"]["risk"]
        assert warned["retention.ms"]["fix"].endswith(f"--entity-name {topic} --add-config retention.ms=-1")
        assert warned["retention.ms"]["log_level"] == "warning"
        # convlog keeps the topic as it is: its retention, and its partition count
        assert (await topic_configs(kafka_bootstrap, topic))["retention.ms"] == SEVEN_DAYS_MS
        assert log.partition_count == 1
        assert any(e["event"] == "kafka_log.partition_count_differs" for e in logs)
    finally:
        await log.close()


async def test_compaction_and_a_size_limit_are_warned_about(kafka_bootstrap: str) -> None:
    topic = unique_topic()
    await create_foreign_topic(
        kafka_bootstrap,
        topic,
        3,
        {"retention.ms": "-1", "retention.bytes": "1073741824", "cleanup.policy": "compact,delete"},
    )
    log, logs = await connect_capturing(kafka_bootstrap, topic, 3)
    try:
        warned = warnings_about_settings(logs)
        assert set(warned) == {"retention.bytes", "cleanup.policy"}
        assert warned["cleanup.policy"]["value"] == "compact,delete"
        assert "newest record per key" in warned["cleanup.policy"]["risk"]
        assert warned["retention.bytes"]["fix"].endswith("--add-config retention.bytes=-1")
    finally:
        await log.close()
