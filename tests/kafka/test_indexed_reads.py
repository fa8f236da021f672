"""Reading a conversation by its coordinates from real Kafka, where offsets are not dense: a
transactional producer leaves a commit marker after every transaction, and the range reads of
query_api.log_reads must fetch exactly the records asked for, across those gaps."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from query_api.log_reads import coalesce, read_offsets
from tests.support import unique_topic

pytestmark = pytest.mark.kafka

KEY = ConversationKey("acme", "u1", "audited")


async def test_reads_by_offset_fetch_exactly_those_records_across_transaction_markers(kafka_bootstrap: str) -> None:
    topic = unique_topic()
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=2, append_timeout_s=20)
    partition = partition_for_key(KEY.encode(), 2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic}-tx")
    await producer.start()
    try:
        wanted: list[int] = []
        for i in range(12):  # one transaction each: a commit marker follows every record
            async with producer.transaction():
                key = KEY.encode() if i % 3 == 0 else f"acme:u1:other-{i}".encode()
                sent = await (await producer.send(topic, value=f"v{i}".encode(), key=key, partition=partition))
            if i % 3 == 0:
                wanted.append(sent.offset)
    finally:
        await producer.stop()
    try:
        assert wanted[1] - wanted[0] > 3  # markers in between: offsets are not dense
        records = await read_offsets(log, partition, wanted, max_gap=0)
        assert [r.offset for r in records] == wanted
        assert {r.key for r in records} == {KEY.encode()}
        records = await read_offsets(log, partition, wanted, max_gap=8)  # read through the others
        assert [r.offset for r in records] == wanted
        assert [r.value for r in records] == [b"v0", b"v3", b"v6", b"v9"]
    finally:
        await log.close()


def test_offsets_coalesce_into_ranges_with_short_gaps() -> None:
    assert coalesce([]) == []
    assert coalesce([5, 6, 7, 20, 21, 60], max_gap=0) == [(5, 7), (20, 21), (60, 60)]
    assert coalesce([5, 6, 7, 20, 21, 60], max_gap=12) == [(5, 21), (60, 60)]
