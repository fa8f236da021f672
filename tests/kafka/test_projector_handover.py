"""A rebalance that takes partitions from a projector with a batch in flight: the batch commits
before the partitions are given up, so the next owner starts at the positions that batch left —
no batch on either side is refused by the positions fence, none is done twice."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence

import pytest

from events.codec import default_codec
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.log import LogRecord
from events.producer import ConversationProducer
from pgstore.store import PostgresProjectionStore
from projectors.kafka_source import KafkaGroupSource
from projectors.ports import BatchReport
from projectors.prepare import PreparedBatch
from projectors.runner import Projector
from projectors.window import WindowPolicy
from tests.projection_support import COUNTER, Projection
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

EVENTS = 400
SLOW_S = 4.0  # the first batch's Postgres work, as on a loaded database


class SlowFirstBatch(PostgresProjectionStore):
    """The real store, whose first batch takes ``SLOW_S`` longer (begun: ``started`` is set)."""

    def __init__(self, projection: Projection) -> None:
        super().__init__(
            projection.pool,
            schema=projection.version.schema,
            codec=default_codec(),
            counter=COUNTER,
            policy=WindowPolicy(),
            max_event_bytes=1 << 20,
        )
        self.started = asyncio.Event()

    async def apply(
        self,
        records: Sequence[LogRecord],
        expected: Mapping[int, int],
        *,
        through: Mapping[int, int] | None = None,
        prepared: PreparedBatch | None = None,
    ) -> BatchReport:
        if records and not self.started.is_set():
            self.started.set()
            await asyncio.sleep(SLOW_S)
        return await super().apply(records, expected, through=through, prepared=prepared)


def _member(bootstrap: str, topic: str, group: str, store: PostgresProjectionStore) -> Projector:
    source = KafkaGroupSource(
        bootstrap=bootstrap, topic=topic, group_id=group, session_timeout_ms=10_000, heartbeat_interval_ms=500
    )
    return Projector(source, store, revoke_wait_s=2 * SLOW_S)


async def test_partitions_change_hands_after_the_batch_in_flight(projection: Projection, kafka_bootstrap: str) -> None:
    topic, group = unique_topic("handover"), f"handover.{uuid.uuid4().hex[:8]}"
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=2)
    producer = ConversationProducer(log, producer="test")
    try:
        for i in range(EVENTS):
            await producer.append_user(ConversationKey("acme", "u", f"c{i % 20}"), f"message {i}")
        ends = await log.end_offsets()
    finally:
        await log.close()
    slow = SlowFirstBatch(projection)
    first = _member(kafka_bootstrap, topic, group, slow)
    second = _member(kafka_bootstrap, topic, group, projection.store())
    stop = asyncio.Event()
    running = [asyncio.create_task(first.run(stop))]
    try:
        await asyncio.wait_for(slow.started.wait(), 60)  # the first member owns both, its batch under way
        running.append(asyncio.create_task(second.run(stop)))  # joining rebalances the group now

        async def caught_up() -> None:  # and the second member took partitions over
            while (
                not second.positions
                or dict(await projection.rows("SELECT partition, next_offset FROM {s}.positions")) != ends
            ):
                assert not any(t.done() for t in running), [t.exception() for t in running if t.done()]
                await asyncio.sleep(0.1)

        await asyncio.wait_for(caught_up(), 60)
    finally:
        stop.set()
        await asyncio.gather(*running)
    assert (first.stats.conflicts, second.stats.conflicts) == (0, 0)
    assert first.stats.applied + second.stats.applied == EVENTS
    assert await projection.rows("SELECT count(*) FROM {s}.event_ids") == [(EVENTS,)]
