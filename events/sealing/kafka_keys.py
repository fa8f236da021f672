"""The Kafka :class:`~events.sealing.ports.KeyRecordLog`: a compacted topic beside the log
(``<topic>.keys`` by default), one partition, record key = the key id.

Compaction is what erases: a destroyed key's last record carries no bytes, and the topic's
settings bound how long its earlier records (with the wrapped bytes) may stay on disk:
``cleanup.policy=compact``, ``min.compaction.lag.ms=0``, ``max.compaction.lag.ms`` and
``segment.ms`` both ``CONVLOG_KEYS_COMPACTION_LAG_S`` (one hour by default): the segment that
holds the earlier record is rolled and becomes due for cleaning within that lag, and the
cleaner cleans it at its next pass (``log.cleaner.backoff.ms``, 15 s by default) — on each
replica — once a record arrives after the lag (Kafka rolls the active segment only on an
append); the replaced files go after ``file.delete.delay.ms`` (at most a minute, or the lag)
(docs/erasure.md, The compaction bound). A topic that exists keeps its settings; ones
that break the bound are logged as warnings at start.

:meth:`~KafkaKeyRecordLog.load` reads from where it stopped (the beginning, first) to the end
offsets it finds on each call; :meth:`~KafkaKeyRecordLog.put` produces with ``acks=all`` and
waits. aiokafka's failures become :class:`~events.errors.KeyStoreUnavailableError` (or
:class:`~events.errors.KeyStoreError` when retrying cannot help) here, at the edge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Final

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from events.errors import KeyStoreError, KeyStoreUnavailableError
from events.sealing.ports import KeyRecord

__all__ = ["DEFAULT_COMPACTION_LAG_S", "KafkaKeyRecordLog", "keys_topic_configs"]

log = structlog.get_logger(__name__)

DEFAULT_COMPACTION_LAG_S: Final = 3600
_TOPIC_ALREADY_EXISTS: Final = 36


def keys_topic_configs(compaction_lag_s: float, replicas: int) -> dict[str, str]:
    """The settings of a new keys topic: compacted within the lag, never deleted by age; the
    segment files a cleaning replaced are deleted after at most a minute (Kafka's default), or
    the lag when it is shorter."""
    lag_ms = int(compaction_lag_s * 1000)
    return {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": str(lag_ms),
        "segment.ms": str(lag_ms),
        "file.delete.delay.ms": str(min(lag_ms, 60_000)),
        "min.insync.replicas": str(min(2, replicas)),
    }


class KafkaKeyRecordLog:
    """The keys topic. Create it with :meth:`connect`."""

    def __init__(self, *, bootstrap: str, topic: str, producer: AIOKafkaProducer, timeout_s: float) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._partition = TopicPartition(topic, 0)
        self._producer = producer
        self._timeout_s = timeout_s
        self._consumer: AIOKafkaConsumer | None = None
        self._latest: dict[str, bytes] = {}
        self._lock = asyncio.Lock()  # one load at a time: they share the consumer's position

    @classmethod
    async def connect(
        cls,
        *,
        bootstrap: str,
        topic: str,
        log_topic: str | None = None,
        compaction_lag_s: float = DEFAULT_COMPACTION_LAG_S,
        timeout_s: float = 30.0,
        client_id: str = "convlog-keys",
    ) -> KafkaKeyRecordLog:
        """Create ``topic`` unless it exists, with as many replicas as ``log_topic`` has (else
        min(3, brokers)), then start an idempotent ``acks=all`` producer."""
        try:
            await _ensure_keys_topic(bootstrap, topic, log_topic, compaction_lag_s, client_id)
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                client_id=client_id,
                acks="all",
                enable_idempotence=True,
                request_timeout_ms=int(timeout_s * 1000),
            )
            await producer.start()
        except (KafkaError, TimeoutError) as e:
            raise _convert(e, f"opening the keys topic {topic} at {bootstrap}") from e
        return cls(bootstrap=bootstrap, topic=topic, producer=producer, timeout_s=timeout_s)

    @property
    def topic(self) -> str:
        return self._topic

    async def load(self) -> Iterable[KeyRecord]:
        async with self._lock:
            try:
                await asyncio.wait_for(self._catch_up(), self._timeout_s)
            except (KafkaError, TimeoutError) as e:
                raise _convert(e, f"reading the keys topic {self._topic}") from e
        return [KeyRecord(key_id, value) for key_id, value in self._latest.items()]

    async def put(self, records: Sequence[KeyRecord]) -> None:
        try:
            sent = [
                await self._producer.send(self._topic, r.value, key=r.key_id.encode("utf-8"), partition=0)
                for r in records
            ]
            await asyncio.wait_for(asyncio.gather(*sent), self._timeout_s)
        except (KafkaError, TimeoutError) as e:
            raise _convert(e, f"writing to the keys topic {self._topic}") from e

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        await self._producer.stop()

    async def _catch_up(self) -> None:
        consumer = await self._reader()
        end = (await consumer.end_offsets([self._partition]))[self._partition]
        while await consumer.position(self._partition) < end:
            batches = await consumer.getmany(self._partition, timeout_ms=200, max_records=10_000)
            for m in batches.get(self._partition, ()):
                key_id = m.key.decode("utf-8") if m.key else ""
                if m.value is None:  # a tombstone (an operator's): the key is gone from the topic
                    self._latest.pop(key_id, None)
                else:
                    self._latest[key_id] = m.value

    async def _reader(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
            )
            await consumer.start()
            consumer.assign([self._partition])
            await consumer.seek_to_beginning(self._partition)
            self._consumer = consumer
        return self._consumer


async def _ensure_keys_topic(
    bootstrap: str, topic: str, log_topic: str | None, compaction_lag_s: float, client_id: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=f"{client_id}-admin")
    await admin.start()
    try:
        existing = await admin.list_topics()
        if topic not in existing:
            replicas = await _replicas(admin, log_topic if log_topic in existing else None)
            configs = keys_topic_configs(compaction_lag_s, replicas)
            new = NewTopic(name=topic, num_partitions=1, replication_factor=replicas, topic_configs=configs)
            response = await admin.create_topics([new])
            for name, code, *rest in response.topic_errors:
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    raise KeyStoreError(f"creating the keys topic {name} failed: error {code} {rest}")
            log.info("key_store.topic_created", topic=topic, replicas=replicas, compaction_lag_s=compaction_lag_s)
        await _wait_visible(admin, topic)
        await _warn_if_not_compacted(admin, topic, compaction_lag_s)
    finally:
        await admin.close()


async def _replicas(admin: AIOKafkaAdminClient, log_topic: str | None) -> int:
    if log_topic is not None:
        described = await admin.describe_topics([log_topic])
        partitions = described[0].get("partitions") if described else None
        if partitions:
            return len(partitions[0].get("replicas") or ()) or 1
    return min(3, len((await admin.describe_cluster()).get("brokers") or ()) or 1)


async def _wait_visible(admin: AIOKafkaAdminClient, topic: str) -> None:
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:  # metadata of a fresh topic propagates asynchronously
        described = await admin.describe_topics([topic])
        if described and described[0].get("error_code", 0) == 0 and described[0].get("partitions"):
            return
        await asyncio.sleep(0.1)
    raise KeyStoreUnavailableError(f"the keys topic {topic} was not visible in metadata after creation")


async def _warn_if_not_compacted(admin: AIOKafkaAdminClient, topic: str, compaction_lag_s: float) -> None:
    """One warning per setting of an existing keys topic that breaks the compaction bound."""
    wanted = keys_topic_configs(compaction_lag_s, 1)
    del wanted["min.insync.replicas"]
    try:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        [resource] = response.to_object()["resources"]
        found = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
    except (KafkaError, ValueError, KeyError) as e:
        log.warning("key_store.topic_settings_unchecked", topic=topic, error=repr(e))
        return
    for setting, value in wanted.items():
        if found.get(setting) != value:
            log.warning(
                "key_store.topic_setting_breaks_compaction_bound",
                topic=topic,
                setting=setting,
                value=found.get(setting),
                expected=value,
            )


def _convert(e: BaseException, action: str) -> KeyStoreError:
    if isinstance(e, TimeoutError) or getattr(e, "retriable", False) or type(e).__name__ == "KafkaTimeoutError":
        return KeyStoreUnavailableError(f"{action}: Kafka did not answer in time or is unreachable ({e!r})")
    if isinstance(e, KafkaError) and type(e).__name__ in {"KafkaConnectionError", "NodeNotReadyError"}:
        return KeyStoreUnavailableError(f"{action}: {e!r}")
    return KeyStoreError(f"{action}: {e!r}")
