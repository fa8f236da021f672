"""The producer API: what a chat app calls. Invalid input never reaches the log."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events.embedded_log import EmbeddedEventLog
from events.errors import EventTooLargeError, InvalidEventError
from events.event_types import ImagePart, MessageAppended, TextPart, ToolCall, Usage
from events.keys import ConversationKey
from events.producer import EVENT_TYPE_HEADER, ConversationProducer
from events.reading import conversation_events

KEY = ConversationKey("acme", "u1", "c1")
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}


async def _stored(log: EmbeddedEventLog) -> list[Any]:
    return [event async for _, event in conversation_events(log, KEY)]


async def test_helpers_store_what_the_app_said(producer: ConversationProducer, log: EmbeddedEventLog) -> None:
    await producer.start_conversation(KEY, title="t")
    await producer.append_system(KEY, "be brief")
    await producer.append_user(
        KEY,
        [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        ],
    )
    await producer.append_assistant(
        KEY,
        None,
        tool_calls=[CALL],
        reasoning_content="think",
        thinking_duration_ms=12,
        model="gpt-4o",
        usage={"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}},
        finish_reason="tool_calls",
    )
    await producer.append_tool_result(KEY, tool_call_id="call_1", content="42", name="lookup")
    await producer.append_assistant(KEY, "it is 42", finish_reason="stop")
    appended = await producer.append_user(KEY, "thanks")
    await producer.redact(KEY, appended.message_id or "", reason="pii")
    await producer.clear(KEY)
    await producer.erase(KEY, reason="gdpr")
    events = await _stored(log)
    assert [e.event_type for e in events] == [
        "ConversationStarted",
        "MessageAppended",
        "MessageAppended",
        "MessageAppended",
        "MessageAppended",
        "MessageAppended",
        "MessageAppended",
        "MessageRedacted",
        "ConversationCleared",
        "ConversationErased",
    ]
    user = events[2].body
    assert user.content == (TextPart("what is this?"), ImagePart("https://x/y.png"))
    assistant = events[3].body
    assert assistant.tool_calls == (ToolCall("call_1", "lookup", '{"q": "x"}'),)
    assert assistant.usage == Usage(prompt_tokens=5, completion_tokens=2, cached_tokens=1)
    assert (assistant.reasoning_content, assistant.thinking_duration_ms) == ("think", 12)
    assert events[4].body.tool_call_id == "call_1"
    assert events[7].body.message_id == appended.message_id
    assert all(e.producer == "test" and e.key == KEY for e in events)


async def test_event_type_travels_in_a_header(producer: ConversationProducer, log: EmbeddedEventLog) -> None:
    await producer.append_user(KEY, "hi")
    record = (await log.read(dict.fromkeys(range(3), 0), timeout_s=0)).records[0]
    assert dict(record.headers)[EVENT_TYPE_HEADER] == b"MessageAppended"


async def test_event_id_is_the_idempotency_key_and_the_default_message_id(
    producer: ConversationProducer,
) -> None:
    a = await producer.append_user(KEY, "hi", event_id="req-1")
    b = await producer.append_user(KEY, "hi", event_id="req-1")
    assert a.event_id == b.event_id == "req-1"
    assert a.message_id == b.message_id == "req-1"


async def test_openai_message_dicts_are_accepted(producer: ConversationProducer, log: EmbeddedEventLog) -> None:
    await producer.append_message(
        KEY,
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
        },
    )
    body = (await _stored(log))[0].body
    assert isinstance(body, MessageAppended)
    assert json.loads(body.tool_calls[0].arguments) == {"a": 1}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "wizard", "content": "x"}, "role"),
        ({"role": "tool", "content": "42"}, "tool_call_id"),
        ({"role": "tool", "content": "42", "tool_call_id": ""}, "tool_call_id"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            "tool_calls[0].id",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{**CALL, "function": {"name": "lookup", "arguments": "{oops"}}],
            },
            "tool_calls[0].arguments",
        ),
        ({"role": "assistant", "tool_calls": [CALL, CALL]}, "tool_calls[1].id"),
        (
            {
                "role": "assistant",
                "tool_calls": [{**CALL, "function": {"name": "bad name", "arguments": "{}"}}],
            },
            "tool_calls[0].name",
        ),
        ({"role": "user", "content": ""}, "content"),
        ({"role": "user"}, "content"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, "tool_call_id"),
        ({"role": "user", "content": "x", "reasoning_content": "r"}, "reasoning_content"),
        (
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x"}}]},
            "content[0]",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]},
            "content[0].url",
        ),
        ({"role": "user", "content": [{"type": "audio"}]}, "content[0].type"),
        ({"role": "user", "content": "x", "name": "has space"}, "name"),
        ({"role": "assistant", "content": "x", "finish_reason": "bored"}, "finish_reason"),
        ({"role": "assistant", "content": "x", "thinking_duration_ms": -1}, "thinking_duration_ms"),
        ({"role": "assistant", "content": "x", "usage": {"prompt_tokens": -3}}, "usage.prompt_tokens"),
        ({"role": "assistant", "content": "x", "usage": {"prompt_tokens": "many"}}, "usage.prompt_tokens"),
    ],
)
async def test_invalid_messages_are_refused_before_the_log(
    producer: ConversationProducer, log: EmbeddedEventLog, message: dict[str, Any], field: str
) -> None:
    before = await log.end_offsets()
    with pytest.raises(InvalidEventError) as info:
        await producer.append_message(KEY, message)
    assert info.value.field == field
    assert await log.end_offsets() == before


async def test_interrupted_stream_is_kept_even_with_unfinished_tool_arguments(
    producer: ConversationProducer,
) -> None:
    appended = await producer.append_assistant(
        KEY,
        "I was say",
        finish_reason="interrupted",
        tool_calls=[{**CALL, "function": {"name": "lookup", "arguments": '{"q": "x'}}],
    )
    assert appended.offset == 0


async def test_oversized_event_is_refused(log: EmbeddedEventLog) -> None:
    producer = ConversationProducer(log, max_event_bytes=1024)
    await producer.append_user(KEY, "x" * 800)
    with pytest.raises(EventTooLargeError) as info:
        await producer.append_user(KEY, "x" * 1100)
    assert info.value.limit == 1024
    assert info.value.size > 1024
    assert sum((await log.end_offsets()).values()) == 1


async def test_default_limit_is_one_mebibyte(producer: ConversationProducer) -> None:
    with pytest.raises(EventTooLargeError):
        await producer.append_user(KEY, "x" * (1024 * 1024))


async def test_redaction_and_events_need_their_fields(producer: ConversationProducer) -> None:
    with pytest.raises(InvalidEventError, match="reason"):
        await producer.redact(KEY, "m1", reason=" ")
    with pytest.raises(InvalidEventError, match="message_id"):
        await producer.redact(KEY, "", reason="pii")
    with pytest.raises(InvalidEventError, match="event_id"):
        await producer.append_user(KEY, "x", event_id="e" * 200)
