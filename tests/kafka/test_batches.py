"""Atomic batches on a real broker: one Kafka record batch, refused whole when too large."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from events.errors import InvalidEventError, LogError
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from events.producer import ConversationProducer
from events.reading import conversation_events
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka]

KEY = ConversationKey("t", "u", "batch").encode()


@pytest.fixture
async def small_request_kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = await KafkaEventLog.connect(
        bootstrap=kafka_bootstrap,
        topic=unique_topic(),
        partitions=2,
        max_request_size=256 * 1024,
        append_timeout_s=20,
    )
    yield log
    await log.close()


async def test_a_batch_above_max_request_size_is_refused_before_it_is_sent(
    small_request_kafka_log: KafkaEventLog,
) -> None:
    partition = partition_for_key(KEY, small_request_kafka_log.partition_count)
    before = await small_request_kafka_log.end_offsets()
    values = [(bytes(100 * 1024), [("i", str(i).encode())]) for i in range(3)]  # 300 KiB > 256 KiB
    with pytest.raises(LogError, match="nothing was appended"):
        await small_request_kafka_log.append_many(key=KEY, values=values)
    assert await small_request_kafka_log.end_offsets() == before
    assert len(await small_request_kafka_log.append_many(key=KEY, values=values[:2])) == 2  # 200 KiB fits
    assert (await small_request_kafka_log.end_offsets())[partition] == before[partition] + 2


async def test_a_batch_the_broker_refuses_is_refused_whole(
    kafka_bootstrap: str, small_request_kafka_log: KafkaEventLog
) -> None:
    """The topic takes record batches of at most 64 KiB: a batch of three 30 KiB records is
    refused as a whole by the broker (never split, never half-written); each alone is taken."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        resource = ConfigResource(
            ConfigResourceType.TOPIC, small_request_kafka_log.topic, {"max.message.bytes": str(64 * 1024)}
        )
        await admin.alter_configs([resource])
    finally:
        await admin.close()
    partition = partition_for_key(KEY, small_request_kafka_log.partition_count)
    before = (await small_request_kafka_log.end_offsets())[partition]
    values = [(bytes(30 * 1024), [("i", str(i).encode())]) for i in range(3)]
    with pytest.raises(LogError) as refused:
        await small_request_kafka_log.append_many(key=KEY, values=values)
    assert not refused.value.retriable
    assert (await small_request_kafka_log.end_offsets())[partition] == before
    [alone] = await small_request_kafka_log.append_many(key=KEY, values=values[:1])
    assert alone.offset == before


async def test_the_producer_appends_a_list_as_one_batch(small_request_kafka_log: KafkaEventLog) -> None:
    """Through the producer on Kafka: a turn of four messages lands at contiguous offsets and
    reads back in order; an invalid message in the list appends nothing."""
    key = ConversationKey("t", "u", "turn")
    producer = ConversationProducer(small_request_kafka_log, producer="test")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    turn = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "a"},
    ]
    partition = partition_for_key(key.encode(), small_request_kafka_log.partition_count)
    before = (await small_request_kafka_log.end_offsets())[partition]
    with pytest.raises(InvalidEventError):
        await producer.append_native(key, "chat_completions", [*turn[:3], {"role": "assistant"}])
    assert (await small_request_kafka_log.end_offsets())[partition] == before
    appended = await producer.append_native(key, "chat_completions", turn, event_id="turn-1")
    assert [a.offset for a in appended] == list(range(before, before + 4))
    stored = [
        (record.offset, event.event_id) async for record, event in conversation_events(small_request_kafka_log, key)
    ]
    assert stored == [(before + i, "turn-1" if i == 0 else f"turn-1/{i}") for i in range(4)]
