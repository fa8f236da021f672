"""The composition root: turns :class:`Settings` into the concrete log and producer."""

from __future__ import annotations

import structlog

from convlog.settings import Settings
from events.embedded_log import EmbeddedEventLog
from events.kafka_log import KafkaEventLog, ensure_topic
from events.log import EventLog
from events.producer import ConversationProducer

log = structlog.get_logger(__name__)


async def open_event_log(settings: Settings, *, read_only: bool = False) -> EventLog:
    """Kafka when ``CONVLOG_KAFKA_BOOTSTRAP`` is set, else the embedded file log — opened
    ``read_only`` by commands that only read, so that they run beside ``convlog serve``."""
    if settings.kafka_bootstrap:
        log.info("event_log.kafka", bootstrap=settings.kafka_bootstrap, topic=settings.topic)
        return await KafkaEventLog.connect(
            bootstrap=settings.kafka_bootstrap,
            topic=settings.topic,
            partitions=settings.partitions,
            max_request_size=settings.max_event_bytes + 64 * 1024,
            append_timeout_s=settings.kafka_ack_timeout_s,
        )
    log.info("event_log.embedded", path=str(settings.embedded_log_path))
    return EmbeddedEventLog.open(settings.embedded_log_path, partitions=settings.partitions, read_only=read_only)


def make_producer(event_log: EventLog, settings: Settings, *, producer: str = "convlog") -> ConversationProducer:
    return ConversationProducer(event_log, producer=producer, max_event_bytes=settings.max_event_bytes)


async def ensure_kafka_topic(settings: Settings, *, client_id: str) -> None:
    """With Kafka, the topic exists before a consumer subscribes to it (see :func:`ensure_topic`)."""
    if settings.kafka_bootstrap:
        await ensure_topic(settings.kafka_bootstrap, settings.topic, settings.partitions, client_id=client_id)
