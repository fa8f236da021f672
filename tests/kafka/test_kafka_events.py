"""The producer API against a real broker: every event type, topic creation, refusal before send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from events.errors import InvalidEventError
from events.event_types import (
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    EventBody,
    ImagePart,
    MessageAppended,
    MessageRedacted,
    SummaryRecorded,
    TextPart,
    ToolCall,
    Usage,
)
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.reading import conversation_events
from tests.support import unique_topic

pytestmark = pytest.mark.kafka

KEY = ConversationKey("acme", "user:with:colons", "会话-1")

BODIES: list[EventBody] = [
    ConversationStarted(title="OA 加班申请", metadata={"channel": "web"}),
    MessageAppended(message_id="m0", role="system", content="你是知识库助手"),
    MessageAppended(
        message_id="m1",
        role="user",
        content=(TextPart("what is this?"), ImagePart("https://example.com/a.png", "low")),
    ),
    MessageAppended(
        message_id="m2",
        role="assistant",
        content=None,
        tool_calls=(ToolCall("c1", "lookup", '{"q":"x"}'), ToolCall("c2", "lookup", "{}")),
        reasoning_content="two lookups",
        thinking_duration_ms=900,
        model="deepseek-v4",
        usage=Usage(10, 5, 2, 3),
        finish_reason="tool_calls",
        metadata={"trace": "t1"},
    ),
    MessageAppended(message_id="m3", role="tool", content="42", tool_call_id="c1", name="lookup"),
    MessageAppended(message_id="m4", role="tool", content="", tool_call_id="c2", name="lookup"),
    MessageAppended(message_id="m5", role="assistant", content="半句", finish_reason="interrupted"),
    MessageRedacted(message_id="m1", reason="pii"),
    SummaryRecorded(
        summary_id="s1",
        text="summary",
        covers_through_message_id="m5",
        model="gpt-4o-mini",
        prompt_version="v1",
        input_tokens=100,
        output_tokens=20,
        summary_tokens=20,
    ),
    ConversationCleared(reason="new chat"),
    ConversationErased(reason="gdpr"),
]


@pytest.fixture
async def kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=unique_topic(), partitions=6)
    yield log
    await log.close()


async def test_every_event_type_round_trips_through_kafka(kafka_log: KafkaEventLog) -> None:
    producer = ConversationProducer(kafka_log, producer="kafka-test")
    start = datetime(2026, 11, 30, 9, 0, 0, 123456, tzinfo=UTC)
    sent = []
    for i, body in enumerate(BODIES):
        at = start + timedelta(seconds=i)
        appended = await producer.append(KEY, body, event_id=f"e{i}", occurred_at=at)
        sent.append(Event(event_id=f"e{i}", key=KEY, occurred_at=at, producer="kafka-test", body=body))
        assert appended.event_id == f"e{i}"
    received = [event async for _, event in conversation_events(kafka_log, KEY)]
    assert received == sent


async def test_an_invalid_event_is_refused_before_it_is_sent(kafka_log: KafkaEventLog) -> None:
    producer = ConversationProducer(kafka_log)
    before = await kafka_log.end_offsets()
    with pytest.raises(InvalidEventError):
        await producer.append_tool_result(KEY, tool_call_id="", content="orphan")
    with pytest.raises(InvalidEventError):
        await producer.append_user(KEY, "x" * (2 * 1024 * 1024))
    assert await kafka_log.end_offsets() == before


async def test_a_missing_topic_is_created_and_an_existing_one_kept(kafka_bootstrap: str) -> None:
    topic = unique_topic()
    first = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=5)
    await first.close()
    second = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=7)
    try:
        assert first.partition_count == 5
        assert second.partition_count == 5  # the topic's real count wins: keys keep their partitions
    finally:
        await second.close()
