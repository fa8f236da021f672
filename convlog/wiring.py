"""The composition root: turns :class:`Settings` into the concrete log, producer and key store."""

from __future__ import annotations

import importlib

import structlog

from convlog.settings import Settings
from events.embedded_log import EmbeddedEventLog
from events.errors import ConfigurationError
from events.kafka_log import KafkaEventLog, ensure_topic
from events.log import EventLog
from events.producer import ConversationProducer
from events.sealing.file_keys import FileKeyRecordLog
from events.sealing.kafka_keys import KafkaKeyRecordLog
from events.sealing.key_store import SubjectKeyStore
from events.sealing.local_kek import LocalMasterKey, MissingMasterKey
from events.sealing.ports import KeyRecordLog, KeyStore, KeyWrapper

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


def make_producer(
    event_log: EventLog, settings: Settings, *, producer: str = "convlog", keys: KeyStore | None = None
) -> ConversationProducer:
    """``keys``: the key store content is sealed with (unless ``CONVLOG_SEALING`` is off) and
    erasure destroys keys in (None: plain records, no keys)."""
    return ConversationProducer(
        event_log, producer=producer, max_event_bytes=settings.max_event_bytes, keys=keys, seal=settings.sealing
    )


async def ensure_kafka_topic(settings: Settings, *, client_id: str) -> None:
    """With Kafka, the topic exists before a consumer subscribes to it (see :func:`ensure_topic`)."""
    if settings.kafka_bootstrap:
        await ensure_topic(settings.kafka_bootstrap, settings.topic, settings.partitions, client_id=client_id)


def open_key_wrapper(settings: Settings, *, read_only: bool = False) -> KeyWrapper:
    """The KEK: ``CONVLOG_KEK_FACTORY``'s (a KMS), else ``CONVLOG_MASTER_KEY``, else the master
    key file in the data directory — created on first use unless ``read_only``."""
    if settings.kek_factory:
        module, _, name = settings.kek_factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise ConfigurationError(f"CONVLOG_KEK_FACTORY={settings.kek_factory}: {e}") from e
        wrapper: KeyWrapper = factory(settings)
        return wrapper
    if settings.master_key is not None:
        return LocalMasterKey.from_setting(settings.master_key.get_secret_value())
    if read_only and not settings.master_key_path.exists():
        return MissingMasterKey(settings.master_key_path)
    return LocalMasterKey.open(settings.master_key_path)


async def open_key_store(
    settings: Settings, *, read_only: bool = False, wrapper: KeyWrapper | None = None
) -> SubjectKeyStore:
    """The key store: the compacted keys topic when ``CONVLOG_KAFKA_BOOTSTRAP`` is set, else the
    keys file beside the embedded log (``read_only``: never written, for commands that only read)."""
    records: KeyRecordLog
    if settings.kafka_bootstrap:
        log.info("key_store.kafka", topic=settings.keys_topic_name)
        records = await KafkaKeyRecordLog.connect(
            bootstrap=settings.kafka_bootstrap,
            topic=settings.keys_topic_name,
            log_topic=settings.topic,
            compaction_lag_s=settings.keys_compaction_lag_s,
            timeout_s=settings.kafka_ack_timeout_s,
        )
    else:
        log.info("key_store.file", path=str(settings.keys_file_path))
        records = FileKeyRecordLog(settings.keys_file_path, read_only=read_only)
    try:
        return await SubjectKeyStore.open(records, wrapper or open_key_wrapper(settings, read_only=read_only))
    except BaseException:
        await records.close()
        raise
