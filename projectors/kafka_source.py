"""The record source over a Kafka consumer group (aiokafka): Kafka spreads the partitions over
the group's members and moves them when members come and go. It never commits offsets: the
positions live in the projection store (:mod:`projectors.ports`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CorruptRecordException, KafkaError, UnsupportedCodecError

from events.errors import LogClosedError
from events.kafka_log import convert_kafka_error, to_log_record
from events.log import LogRecord, ReadBatch
from projectors.ports import AssignmentListener, UnreadableBatch, check_within_log_end, checked_positions

log = structlog.get_logger(__name__)


# A record batch the client cannot decode: a codec it lacks, a checksum that fails.
_UNREADABLE = (UnsupportedCodecError, CorruptRecordException)
UNREADABLE_RETRY_S = 60.0  # a partition stopped at an unreadable batch tries it again this often


class KafkaGroupSource:
    """A member of Kafka consumer group ``group_id`` reading ``topic``.

    aiokafka rebalances eagerly: every owned partition is revoked, then the new set (which may
    repeat some) is assigned. ``listener.on_revoked`` runs inside aiokafka's callback, in its
    own task, concurrently with :meth:`fetch`; it must return within ``rebalance_timeout_ms``
    (aiokafka's default: ``session_timeout_ms``) or the broker drops this member.
    ``listener.on_assigned`` runs in the next :meth:`fetch`, which raises what it raises and
    asks again on the following one; the partitions stay paused until it has answered.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        topic: str,
        group_id: str,
        client_id: str = "convlog-projector",
        max_poll_interval_ms: int = 300_000,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int | None = None,
        group_instance_id: str | None = None,
    ) -> None:
        """``group_instance_id`` makes this a static member: a restarted process with the same id
        takes its partitions back at once instead of waiting out ``session_timeout_ms`` and a
        rebalance; a stopped one keeps them until that timeout."""
        self._topic = topic
        self._options: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "group_id": group_id,
            "client_id": client_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "isolation_level": "read_committed",
            "max_poll_interval_ms": max_poll_interval_ms,
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "rebalance_timeout_ms": rebalance_timeout_ms,
            "group_instance_id": group_instance_id,
        }
        self._consumer: AIOKafkaConsumer | None = None
        self._listener: AssignmentListener | None = None
        self._next: dict[int, int] = {}  # owned and positioned partition -> next offset to return
        self._unpositioned: frozenset[int] = frozenset()  # assigned, paused, listener not yet answered
        self._generation = 0  # bumped by every rebalance callback
        self._unreadable: dict[int, tuple[int, float]] = {}  # paused partition -> (offset, retry at)
        self._reported: list[UnreadableBatch] = []

    async def start(self, listener: AssignmentListener) -> None:
        consumer = AIOKafkaConsumer(**self._options)
        self._listener = listener
        try:
            await consumer.start()
            consumer.subscribe([self._topic], listener=_Rebalance(self))
        except KafkaError as e:
            await consumer.stop()
            raise convert_kafka_error(e, action=f"joining group {self._options['group_id']}") from e
        self._consumer = consumer

    async def fetch(self, *, max_records: int, timeout_s: float) -> ReadBatch:
        consumer = self._running()
        if self._unpositioned:
            await self._position()
        self._retry_unreadable()
        try:
            # getmany waits for a rebalance in progress without a bound of its own
            async with asyncio.timeout(timeout_s):
                batches = await consumer.getmany(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except _UNREADABLE as e:
            return ReadBatch(
                await self._read_around_unreadable(e, max_records=max_records, timeout_s=timeout_s), dict(self._next)
            )
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"reading {self._topic}") from e
        except TimeoutError:
            # No records, yet the position may have moved past aborted records and their marker:
            # a partition whose last transaction was aborted must still reach its end.
            await self._follow_positions(consumer)
            return ReadBatch([], dict(self._next))
        records: list[LogRecord] = []
        for tp, messages in batches.items():
            next_offset = self._next.get(tp.partition)
            if next_offset is None:
                continue  # revoked while the fetch was under way
            fresh = [m for m in messages if m.offset >= next_offset]
            if len(fresh) < len(messages):
                log.warning("sources.stale_records_dropped", partition=tp.partition, next_offset=next_offset)
            if fresh:
                records.extend(to_log_record(m) for m in fresh)
                self._next[tp.partition] = fresh[-1].offset + 1
        await self._follow_positions(consumer)
        return ReadBatch(records, dict(self._next))

    async def _follow_positions(self, consumer: AIOKafkaConsumer) -> None:
        """Take the consumer's positions: they move past transaction markers and aborted records,
        which getmany never returns (a partition ending with a marker is read to its end)."""
        for p in list(self._next):
            try:
                position = await consumer.position(TopicPartition(self._topic, p))
            except KafkaError:  # IllegalStateError: revoked meanwhile
                continue
            if p in self._next and position > self._next[p]:
                self._next[p] = position

    def seek(self, partition: int, offset: int) -> None:
        if partition not in self._next:
            return
        try:
            self._running().seek(TopicPartition(self._topic, partition), offset)
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"seeking {self._topic}[{partition}]") from e
        self._next[partition] = offset

    def take_unreadable(self) -> list[UnreadableBatch]:
        reported, self._reported = self._reported, []
        return [u for u in reported if u.partition in self._next]

    async def _read_around_unreadable(
        self, error: KafkaError, *, max_records: int, timeout_s: float
    ) -> list[LogRecord]:
        """``getmany`` raised for a batch it cannot decode. It does not say of which partition,
        the records of other partitions it had drained are lost with the exception, and it
        moved their positions past them (a later call would skip them). So: seek every owned
        partition back to the next offset to return, then read one partition at a time, one
        record at a time, up to the batch that fails — the records before it are returned —
        and pause that partition there. The next fetches read the others as usual."""
        consumer = self._running()
        log.warning("sources.unreadable_batch", topic=self._topic, error=f"{type(error).__name__}: {error}")
        for p, offset in self._next.items():
            consumer.seek(TopicPartition(self._topic, p), offset)
        tps = {p: TopicPartition(self._topic, p) for p in self._next if p not in self._unreadable}
        try:
            ends = await consumer.end_offsets(list(tps.values()))
            records: list[LogRecord] = []
            for p, tp in sorted(tps.items()):
                while len(records) < max_records and p in self._next and self._next[p] < ends[tp]:
                    try:
                        async with asyncio.timeout(timeout_s):
                            got = (await consumer.getmany(tp, timeout_ms=int(timeout_s * 1000), max_records=1)).get(tp)
                    except _UNREADABLE as e:
                        self._pause_unreadable(p, e)
                        break
                    except TimeoutError:
                        break
                    if not got:
                        break  # nothing more within the timeout (a transaction marker ends the partition)
                    fresh = [m for m in got if m.offset >= self._next[p]]
                    records.extend(to_log_record(m) for m in fresh)
                    if fresh:
                        self._next[p] = fresh[-1].offset + 1
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"reading {self._topic} around an unreadable batch") from e
        return records

    def _pause_unreadable(self, partition: int, error: KafkaError) -> None:
        tp, offset = TopicPartition(self._topic, partition), self._next[partition]
        consumer = self._running()
        consumer.pause(tp)
        consumer.seek(tp, offset)  # drops what aiokafka buffered past it
        self._unreadable[partition] = (offset, time.monotonic() + UNREADABLE_RETRY_S)
        message = f"{type(error).__name__}: {error}"
        self._reported.append(UnreadableBatch(partition, offset, message))
        log.error(
            "sources.partition_stopped_at_unreadable_batch",
            topic=self._topic,
            partition=partition,
            offset=offset,
            error=message,
            retry_in_s=UNREADABLE_RETRY_S,
        )

    def _retry_unreadable(self) -> None:
        """Read a partition stopped at an unreadable batch again, now and then: a checksum
        failure may have been the network's, a replica's; after a fix, the batch reads."""
        now = time.monotonic()
        for p, (offset, retry_at) in list(self._unreadable.items()):
            if p not in self._next:
                del self._unreadable[p]
            elif now >= retry_at:
                del self._unreadable[p]
                tp = TopicPartition(self._topic, p)
                self._running().seek(tp, offset)
                self._running().resume(tp)

    @property
    def assigned(self) -> frozenset[int]:
        return frozenset(self._next)

    async def stop(self) -> None:
        """Tell the listener it owns nothing any more, then leave the group (no commit)."""
        consumer, listener, owned = self._consumer, self._listener, self.assigned
        self._consumer, self._listener, self._next, self._unpositioned = None, None, {}, frozenset()
        if consumer is None:
            return
        try:
            if listener is not None and owned:
                await listener.on_revoked(owned)
        finally:
            await consumer.stop()

    def _running(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise LogClosedError(f"the group source for {self._topic} is not running")
        return self._consumer

    async def _revoked(self, partitions: frozenset[int]) -> None:
        if self._consumer is None:
            return  # stopping: stop() told the listener already
        self._generation += 1
        owned = self.assigned & partitions
        self._next = {p: o for p, o in self._next.items() if p not in partitions}
        self._unpositioned -= partitions
        for p in partitions:
            self._unreadable.pop(p, None)  # a new owner (or this one, assigned again) reads it afresh
        if owned and self._listener is not None:
            await self._listener.on_revoked(owned)

    def _assigned(self, partitions: frozenset[int]) -> None:
        if self._consumer is None:
            return
        self._generation += 1
        # The next fetch asks the listener, not this callback: aiokafka sends no heartbeats
        # while it runs (a slow Postgres would get this member expelled), and it already
        # fetches new partitions from auto_offset_reset, so they stay paused until positioned.
        self._consumer.pause(*(TopicPartition(self._topic, p) for p in partitions))
        self._unpositioned = partitions

    async def _position(self) -> None:
        """Ask the listener where the newly assigned partitions start, seek there, resume them."""
        partitions, generation, listener, consumer = (
            self._unpositioned,
            self._generation,
            self._listener,
            self._running(),
        )
        assert listener is not None
        positions = checked_positions(partitions, await listener.on_assigned(partitions))
        try:
            ends = await consumer.end_offsets([TopicPartition(self._topic, p) for p in positions])
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"reading the end offsets of {self._topic}") from e
        if generation != self._generation or self._consumer is None:
            # a rebalance or stop overtook the answer: take it back; the next fetch asks anew
            await listener.on_revoked(partitions)
            return
        check_within_log_end(positions, {tp.partition: o for tp, o in ends.items()}, where=f"topic {self._topic}")
        try:
            for p, offset in positions.items():
                consumer.seek(TopicPartition(self._topic, p), offset)
            consumer.resume(*(TopicPartition(self._topic, p) for p in partitions))
        except KafkaError as e:
            raise convert_kafka_error(e, action=f"seeking {self._topic}") from e
        self._next.update(positions)
        self._unpositioned = frozenset()


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka awaits these in its coordinator task and only logs what they raise."""

    def __init__(self, source: KafkaGroupSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        try:
            await self._source._revoked(frozenset(tp.partition for tp in revoked))
        except Exception:
            log.exception("sources.on_revoked_failed", partitions=sorted(tp.partition for tp in revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._source._assigned(frozenset(tp.partition for tp in assigned))
