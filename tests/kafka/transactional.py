"""A producer as a Java or Kafka Streams app with exactly-once on writes: every append goes
into a Kafka transaction (aiokafka ``transactional_id``), which ends with a commit or an abort
marker — a control record that takes an offset and that no consumer is ever given."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaProducer

from events.keys import ConversationKey, partition_for_key
from events.log import Coordinates, ReadBatch
from events.producer import ConversationProducer


class TransactionalLog:
    """The append side of an event log whose appends join the producer's open transaction."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, partition_count: int) -> None:
        self.producer, self._topic, self._partition_count = producer, topic, partition_count

    @property
    def partition_count(self) -> int:
        return self._partition_count

    async def append(self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Coordinates:
        partition = partition_for_key(key, self._partition_count)
        sent = await self.producer.send_and_wait(
            self._topic, value, key=key, partition=partition, headers=list(headers)
        )
        return Coordinates(sent.partition, sent.offset)

    async def read(self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0) -> ReadBatch:
        raise NotImplementedError("write-only")

    async def end_offsets(self, partitions: Collection[int] | None = None) -> dict[int, int]:
        raise NotImplementedError("write-only")

    async def close(self) -> None:
        await self.producer.stop()


@asynccontextmanager
async def transactional_app(
    bootstrap: str, topic: str, partitions: int
) -> AsyncIterator[tuple[ConversationProducer, AIOKafkaProducer]]:
    """A convlog event producer whose appends join the transaction the Kafka producer beside it
    has open (``async with kafka.transaction(): ...``, or begin / abort by hand)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"java-app-{uuid.uuid4().hex[:8]}",
        enable_idempotence=True,
        acks="all",
    )
    await producer.start()
    try:
        yield ConversationProducer(TransactionalLog(producer, topic, partitions), producer="java-app"), producer
    finally:
        await producer.stop()


def keys_on_distinct_partitions(count: int, partitions: int, *, prefix: str) -> list[ConversationKey]:
    """``count`` conversation keys, each on a partition of its own."""
    found: dict[int, ConversationKey] = {}
    for i in range(10_000):
        key = ConversationKey("acme", "u1", f"{prefix}-{i}")
        found.setdefault(partition_for_key(key.encode(), partitions), key)
        if len(found) == count:
            return list(found.values())
    raise AssertionError("no keys on enough distinct partitions")
