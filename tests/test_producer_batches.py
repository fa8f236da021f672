"""A payload of several messages is one atomic batch: all validated first, appended in order,
contiguous, or none; ids per events.batches."""

from __future__ import annotations

import dataclasses

import pytest

from events.embedded_log import EmbeddedEventLog
from events.errors import EventTooLargeError, InvalidEventError, InvalidRequestError, NativeFormatError
from events.event_types import MessageAppended
from events.formats.registry import FORMATS
from events.keys import ConversationKey, partition_for_key
from events.producer import ConversationProducer
from events.reading import conversation_events
from events.servable import MAX_NESTING
from tests import fake_native

KEY = ConversationKey("acme", "u1", "batch")
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
TURN = [
    {"role": "user", "content": "look it up"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    {"role": "assistant", "content": "it is 42", "message_id": "answer"},
]


async def _messages(log: EmbeddedEventLog) -> list[tuple[int, str, MessageAppended]]:
    out = []
    async for record, event in conversation_events(log, KEY):
        assert isinstance(event.body, MessageAppended)
        out.append((record.offset, event.event_id, event.body))
    return out


async def _end(log: EmbeddedEventLog) -> int:
    return (await log.end_offsets())[partition_for_key(KEY.encode(), log.partition_count)]


async def test_a_chat_completions_list_is_appended_in_order_contiguously(
    producer: ConversationProducer, log: EmbeddedEventLog
) -> None:
    await producer.append_user(KEY, "before")
    appended = await producer.append_native(KEY, "chat_completions", TURN, event_id="k")
    assert [a.event_id for a in appended] == ["k", "k/1", "k/2", "k/3"]
    assert [a.message_id for a in appended] == ["k", "k/1", "k/2", "answer"]  # a named id is kept
    assert [a.offset for a in appended] == [1, 2, 3, 4]
    stored = await _messages(log)
    assert [(o, e, m.role) for o, e, m in stored[1:]] == [
        (1, "k", "user"),
        (2, "k/1", "assistant"),
        (3, "k/2", "tool"),
        (4, "k/3", "assistant"),
    ]
    assert stored[2][2].tool_calls[0].id == "call_1"


async def test_one_message_object_is_stored_as_before(producer: ConversationProducer, log: EmbeddedEventLog) -> None:
    [one] = await producer.append_native(KEY, "chat_completions", {"role": "user", "content": "hi"}, event_id="k1")
    [old] = [await producer.append_message(KEY, {"role": "user", "content": "hi"}, event_id="k2")]
    assert (one.event_id, one.message_id) == ("k1", "k1")
    assert (old.event_id, old.message_id) == ("k2", "k2")
    [(_, _, a), (_, _, b)] = await _messages(log)
    assert a == dataclasses.replace(b, message_id="k1")


async def test_without_a_key_a_batch_gets_fresh_ids_derived_from_its_first(producer: ConversationProducer) -> None:
    first = await producer.append_native(KEY, "chat_completions", TURN[:2])
    second = await producer.append_native(KEY, "chat_completions", TURN[:2])
    assert first[1].event_id == f"{first[0].event_id}/1"
    assert first[0].event_id != second[0].event_id
    assert first[1].message_id == f"{first[0].event_id}/1"


async def test_one_invalid_message_refuses_the_whole_list(
    producer: ConversationProducer, log: EmbeddedEventLog
) -> None:
    before = await _end(log)
    bad = [*TURN[:2], {"role": "tool", "content": "no call id"}, TURN[3]]
    with pytest.raises(InvalidEventError) as refused:
        await producer.append_native(KEY, "chat_completions", bad)
    assert refused.value.field == "[2].tool_call_id"
    with pytest.raises(InvalidEventError) as refused:
        await producer.append_native(KEY, "chat_completions", [TURN[0], {"role": "robot"}])
    assert refused.value.field == "[1].role"
    assert await _end(log) == before


async def test_an_empty_list_is_refused(producer: ConversationProducer) -> None:
    with pytest.raises(NativeFormatError) as refused:
        await producer.append_native(KEY, "chat_completions", [])
    assert refused.value.code == "empty_payload"


async def test_a_batch_is_limited_like_one_event(log: EmbeddedEventLog) -> None:
    producer = ConversationProducer(log, producer="test", max_event_bytes=4000)
    text = "x" * 1500
    with pytest.raises(EventTooLargeError):
        await producer.append_native(KEY, "chat_completions", [{"role": "user", "content": text}] * 3)
    assert len(await producer.append_native(KEY, "chat_completions", [{"role": "user", "content": text}] * 2)) == 2


async def test_unknown_and_unavailable_formats_are_refused(log: EmbeddedEventLog) -> None:
    producer = ConversationProducer(log, producer="test", formats=FORMATS.without("gemini"))  # a build without it
    for name in ("klingon", "gemini"):
        with pytest.raises(InvalidRequestError) as refused:
            await producer.append_native(KEY, name, {})
        assert refused.value.code == "unknown_format"


async def test_a_native_payload_with_its_own_id_is_the_same_events_twice(
    producer: ConversationProducer, log: EmbeddedEventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_native.register(monkeypatch)
    payload = fake_native.payload(
        {"role": "assistant", "text": "a", "calls": ["c1"]},
        {"role": "tool", "text": "r", "answers": "c1"},
        native_id="msg_1",
    )
    first = await producer.append_anthropic_message(KEY, payload)
    again = await producer.append_anthropic_message(KEY, payload)
    assert [a.event_id for a in first] == [a.event_id for a in again]
    ids = [first[0].event_id, f"{first[0].event_id}/1"]
    assert [a.message_id for a in first] == [a.message_id for a in again] == ids
    other = await producer.append_anthropic_message(KEY, payload | {"id": "msg_2"})
    assert other[0].event_id != first[0].event_id
    keyed = await producer.append_anthropic_message(KEY, payload, event_id="idem")
    assert [a.event_id for a in keyed] == ["idem", "idem/1"]
    stored = await _messages(log)
    assert [m.role for _, _, m in stored] == ["assistant", "tool"] * 4  # (blocks and api: the v4 codec's part)


async def test_a_native_message_the_validator_refuses_names_its_index(
    producer: ConversationProducer, log: EmbeddedEventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_native.register(monkeypatch)
    before = await _end(log)
    payload = fake_native.payload({"role": "user", "text": "q"}, {"role": "assistant", "calls": ["c1"], "bad": True})
    with pytest.raises(InvalidEventError) as refused:
        await producer.append_native(KEY, "anthropic", payload)
    assert refused.value.field == "messages[1].blocks[0].name"
    with pytest.raises(NativeFormatError) as broken:
        await producer.append_native(KEY, "anthropic", fake_native.payload({"role": "nonsense"}))
    assert (broken.value.code, broken.value.field) == ("unknown_role", "messages[0].role")
    assert await _end(log) == before


async def test_a_json_text_nested_past_the_limit_is_refused(producer: ConversationProducer) -> None:
    """Chat Completions arguments are a string of JSON, which the payload's own depth does not
    show: the producer refuses them past the nesting every format's context can carry (Anthropic
    and Gemini contexts put them in the body parsed), as it refuses the payload itself."""
    deep = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
    call = {**CALL, "function": {"name": "lookup", "arguments": deep}}
    key = ConversationKey("t", "u", "deep")
    with pytest.raises(InvalidEventError) as info:
        producer.build_native(key, "chat_completions", [TURN[0], {"role": "assistant", "tool_calls": [call]}])
    assert (info.value.code, info.value.field) == ("nested_too_deep", "[1].tool_calls[0].arguments")
    shallow = "[" * MAX_NESTING + "]" * MAX_NESTING
    producer.build_native(
        key,
        "chat_completions",
        {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "lookup", "arguments": shallow}}]},
    )
