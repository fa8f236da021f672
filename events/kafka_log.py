"""The Kafka event log (aiokafka).

Producer: ``acks=all`` and idempotence on, so an acknowledged append is on every in-sync
replica and the producer's own retries cannot write it twice. The partition is chosen by
:func:`events.keys.partition_for_key` — the Java client's murmur2 — and passed explicitly,
so both backends and foreign producers agree by construction.

A batch (:meth:`KafkaEventLog.append_many`) is one Kafka record batch on one partition
(aiokafka's ``create_batch`` / ``send_batch``): the broker appends a record batch whole, at
contiguous offsets, or refuses it whole (a batch above the topic's ``max.message.bytes`` is
refused, never split). The idempotent producer stamps it with its producer id and sequence like
any batch it sends, so a retry cannot write it twice. The producer's batch size is its
``max_request_size``: a batch up to that size fits; a larger one is refused before it is sent.

Reader: a group-less consumer with manual assignment and seeks; it never commits offsets
(positions belong to whoever reads — projectors keep theirs in Postgres). It reads committed
records only (``read_committed``) and reports the consumer's position after each fetch, which
moves past transaction markers and aborted records that it never returns. Between reads its
partitions are paused: an idle reader sends the broker nothing, and no fetch of its own is
left waiting at the broker in front of the next read's requests.

The topic is created (or checked) by :mod:`events.kafka_topics`; aiokafka's failures and records
become the port's in :mod:`events.kafka_conversions`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Collection, Mapping, Sequence
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from events.errors import LogClosedError, LogError, LogUnavailableError
from events.kafka_conversions import convert_kafka_error, to_log_record
from events.kafka_topics import create_topic, ensure_topic
from events.keys import partition_for_key
from events.log import Coordinates, ReadBatch

__all__ = ["KafkaEventLog", "convert_kafka_error", "ensure_topic", "to_log_record"]

log = structlog.get_logger(__name__)

# How often a read that got no records looks whether the consumer's position moved anyway (it
# skipped a transaction marker or aborted records): aiokafka's getmany only wakes for records.
_POSITION_CHECK_S = 0.05
# How long the broker may hold the reader's fetch when there is nothing new to return. Between
# reads the reader's partitions are paused, so it sends no fetch at all while idle; this bounds
# how long a read that waits at a partition's end (tail) keeps the connection busy.
_READER_FETCH_WAIT_MS = 100
# Keys whose partition is remembered (murmur2 in Python is ~2.5 µs a key; a conversation's
# events share one key). Past this many the memo starts over.
_PARTITION_MEMO_SIZE = 65536


class KafkaEventLog:
    """An :class:`~events.log.EventLog` on a Kafka topic. Create it with :meth:`connect`."""

    def __init__(
        self,
        *,
        bootstrap: str,
        topic: str,
        partition_count: int,
        producer: AIOKafkaProducer,
        append_timeout_s: float,
        max_request_size: int = 2 * 1024 * 1024,
    ) -> None:
        self._bootstrap = bootstrap
        self._max_request_size = max_request_size
        self._topic = topic
        self._partition_count = partition_count
        self._producer = producer
        self._deadlines = _AckDeadlines(append_timeout_s)
        self._consumer: AIOKafkaConsumer | None = None
        self._next: dict[int, int] = {}  # where the reader's fetch position is, per assigned partition
        self._partition_of: dict[bytes, int] = {}
        # One reader consumer serves every read: concurrent readers (each with its own positions)
        # take turns, or one would receive records fetched from the other's positions.
        self._read_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def connect(
        cls,
        *,
        bootstrap: str,
        topic: str,
        partitions: int = 12,
        replication_factor: int | None = None,
        client_id: str = "convlog",
        max_request_size: int = 2 * 1024 * 1024,
        linger_ms: int = 2,
        append_timeout_s: float = 30.0,
    ) -> KafkaEventLog:
        """Create the topic with ``partitions`` if missing, then start an idempotent producer.

        A new topic keeps its records forever (``retention.ms=-1``: the log is the source of
        truth) and gets ``replication_factor`` replicas — by default min(3, brokers) — with
        ``min.insync.replicas`` = min(2, replicas), so ``acks=all`` means two copies when it can.
        """
        try:
            partition_count = await create_topic(bootstrap, topic, partitions, replication_factor, client_id)
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                client_id=client_id,
                acks="all",
                enable_idempotence=True,
                linger_ms=linger_ms,
                max_request_size=max_request_size,
                # append_many builds one record batch of this size at most (create_batch()).
                max_batch_size=max_request_size,
                request_timeout_ms=int(append_timeout_s * 1000),
            )
            await producer.start()
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"connecting to Kafka at {bootstrap}") from e
        if partition_count != partitions:
            log.warning(
                "kafka_log.partition_count_differs",
                topic=topic,
                actual=partition_count,
                configured=partitions,
            )
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            partition_count=partition_count,
            producer=producer,
            append_timeout_s=append_timeout_s,
            max_request_size=max_request_size,
        )

    @property
    def partition_count(self) -> int:
        return self._partition_count

    @property
    def topic(self) -> str:
        return self._topic

    async def append(self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Coordinates:
        self._check_open()
        partition = self._partition(key)
        # send() itself is bounded by request_timeout_ms (metadata and buffer waits); the
        # acknowledgement is not — aiokafka retries a batch for as long as the broker is away.
        sending = self._producer.send(self._topic, value, key=key, partition=partition, headers=list(headers))
        metadata = await self._acknowledged(sending, partition)
        return Coordinates(metadata.partition, metadata.offset)

    async def append_many(
        self, *, key: bytes, values: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]]
    ) -> list[Coordinates]:
        self._check_open()
        if not values:
            return []
        partition = self._partition(key)
        limit = self._max_request_size
        too_large = LogError(
            f"appending {len(values)} records to {self._topic}[{partition}] as one batch: together they exceed "
            f"{limit} bytes (max_request_size); nothing was appended"
        )
        batch = self._producer.create_batch()
        for value, headers in values:
            if batch.append(timestamp=None, key=key, value=value, headers=list(headers)) is None:
                raise too_large  # the batch is full (its size is max_request_size)
        if batch.size() > limit:  # one record alone may overfill it; send_batch does not check
            raise too_large
        batch.close()
        sending = self._producer.send_batch(batch, self._topic, partition=partition)
        metadata = await self._acknowledged(sending, partition)
        return [Coordinates(metadata.partition, metadata.offset + i) for i in range(len(values))]

    def _partition(self, key: bytes) -> int:
        partition = self._partition_of.get(key)
        if partition is None:
            if len(self._partition_of) >= _PARTITION_MEMO_SIZE:
                self._partition_of.clear()
            partition = self._partition_of[key] = partition_for_key(key, self._partition_count)
        return partition

    async def _acknowledged(self, sending: Awaitable[asyncio.Future[Any]], partition: int) -> Any:
        """The broker's acknowledgement of a send (RecordMetadata; of a batch: its first offset)."""
        try:
            sent = await sending
            self._deadlines.watch(sent)
            return await sent
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"appending to {self._topic}[{partition}]") from e
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # our caller is being cancelled, not the acknowledgement
            raise LogUnavailableError(
                f"appending to {self._topic}[{partition}]: no acknowledgement within "
                f"{self._deadlines.timeout_s:g}s; it may still be written: retry with the same event_id"
            ) from None

    async def read(self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0) -> ReadBatch:
        self._check_open()
        try:
            async with self._read_lock:
                consumer = await self._reader()
                self._position_reader(consumer, positions)
                try:
                    batches = await self._fetch(consumer, positions, max_records, timeout_s)
                    after = {p: await consumer.position(TopicPartition(self._topic, p)) for p in positions}
                except BaseException:
                    self._next = {}  # cancelled or failed mid-fetch: where the consumer is is unknown, seek next time
                    raise
                finally:
                    self._rest(consumer)
                self._next = dict(after)
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"reading {self._topic}") from e
        records = [to_log_record(m) for messages in batches.values() for m in messages]
        return ReadBatch(records, after)

    async def _fetch(
        self, consumer: AIOKafkaConsumer, positions: Mapping[int, int], max_records: int, timeout_s: float
    ) -> dict[TopicPartition, list[Any]]:
        """Records within ``timeout_s``; returns early without any once the position moved
        (the fetch held only transaction markers or aborted records)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            wait_s = min(max(remaining, 0.0), _POSITION_CHECK_S)
            batches: dict[TopicPartition, list[Any]] = await consumer.getmany(
                timeout_ms=int(wait_s * 1000), max_records=max_records
            )
            if batches or remaining <= wait_s:
                return batches
            for p, offset in positions.items():
                if await consumer.position(TopicPartition(self._topic, p)) != offset:
                    return {}

    def _position_reader(self, consumer: AIOKafkaConsumer, positions: Mapping[int, int]) -> None:
        for p in positions:
            if not 0 <= p < self._partition_count:
                raise LogError(f"partition {p} does not exist (0..{self._partition_count - 1})")
        if set(positions) != set(self._next):
            consumer.assign([TopicPartition(self._topic, p) for p in positions])
            self._next = {}
        for p, offset in positions.items():
            if self._next.get(p) != offset:
                consumer.seek(TopicPartition(self._topic, p), offset)
                self._next[p] = offset
        consumer.resume(*consumer.assignment())

    def _rest(self, consumer: AIOKafkaConsumer) -> None:
        """Pause the reader's partitions until the next read. Assigned and running, the consumer's
        background fetcher would keep a fetch request waiting at the broker all the time; the
        broker answers one connection's requests in order, so the next read's ListOffsets and its
        fetch after a seek waited for that fetch to expire (fetch_max_wait_ms, 500 ms by default).
        Paused before its next fetch is sent (no await between getmany and this), it sends none:
        idle, the reader costs the broker nothing, and the next read's fetch goes out at once."""
        consumer.pause(*consumer.assignment())

    async def end_offsets(self, partitions: Collection[int] | None = None) -> dict[int, int]:
        self._check_open()
        # aiokafka answers once every partition asked for has a leader: asked for all, a
        # leaderless one would stall callers that need another (an append's idempotency look-up).
        chosen = range(self._partition_count) if partitions is None else sorted(set(partitions))
        tps = [TopicPartition(self._topic, p) for p in chosen]
        try:
            ends = await (await self._reader()).end_offsets(tps)
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"reading end offsets of {self._topic}") from e
        return {tp.partition: offset for tp, offset in ends.items()}

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._consumer is not None:
            await self._consumer.stop()
        await self._producer.stop()
        self._deadlines.stop()

    async def _reader(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
                fetch_max_wait_ms=_READER_FETCH_WAIT_MS,
            )
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"Kafka log for {self._topic} is closed")


class _AckDeadlines:
    """Gives up on acknowledgements that take longer than ``timeout_s``.

    One watcher task for all appends instead of a timer per append (a per-append
    ``asyncio.timeout`` cost the producer a sixth of its throughput). Cancelling aiokafka's
    delivery future is documented as safe: the record is not unsent, the caller stops waiting.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._pending: deque[tuple[float, asyncio.Future[Any]]] = deque()
        self._task: asyncio.Task[None] | None = None

    def watch(self, future: asyncio.Future[Any]) -> None:
        self._pending.append((time.monotonic() + self.timeout_s, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._expire())

    async def _expire(self) -> None:
        pending = self._pending
        while pending:
            deadline, future = pending[0]
            if future.done():
                pending.popleft()
                continue
            wait = deadline - time.monotonic()
            if wait > 0:
                await asyncio.sleep(min(wait, 1.0))
                continue
            pending.popleft()
            future.cancel()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
