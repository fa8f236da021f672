"""Native (schema v4) messages for the read-model tests, and a way through the log for them.

The read models keep a native message's blocks, provider, api and is_error (and usage's
cache_write_tokens), but until ``schemas/event.v4.avsc`` ships the codec writes a message's v3
fields only (its Chat Completions view) and drops the rest. :func:`carrying_v4` lets the
projection, ``as_of`` and the audit tests append native messages through the real producer,
log and projector anyway: while it is active, the shared codec (``default_codec()``, which every
producer, store and reader here uses) remembers each native body it encodes by conversation and
event id, and hands it back when that event is decoded. A codec that round-trips v4 already is
left alone, so these tests run unchanged — then through the real encoding — once it does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime

from events.blocks import Block, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.codec import EventCodec, default_codec
from events.event_types import Event, MessageAppended, Usage
from events.keys import ConversationKey


def _has_v4(body: object) -> bool:
    if not isinstance(body, MessageAppended):
        return False
    usage_v4 = body.usage is not None and body.usage.cache_write_tokens is not None
    return bool(body.blocks) or usage_v4 or any(v is not None for v in (body.provider, body.api, body.is_error))


def codec_writes_v4(codec: EventCodec) -> bool:
    probe = native_message(message_id="m", role="assistant", blocks=(TextBlock("x", item_id="i"),), api="responses",
                           provider="openai", usage=Usage(cache_write_tokens=1))  # fmt: skip
    event = Event("e", ConversationKey("t", "u", "c"), datetime(2026, 1, 1, tzinfo=UTC), "probe", probe)
    return codec.decode(codec.encode(event)).body == probe


# By conversation and event id, for the whole run: a log written under one carrier (an earlier
# hypothesis example's) is read back under another.
_CARRIED: dict[tuple[str, str], MessageAppended] = {}


@contextmanager
def carrying_v4(codec: EventCodec | None = None) -> Iterator[None]:
    codec = codec or default_codec()
    if codec_writes_v4(codec):
        yield
        return
    bodies = _CARRIED
    encode, decode = codec.encode, codec.decode

    def encode_remembering(event: Event) -> bytes:
        if _has_v4(event.body):
            assert isinstance(event.body, MessageAppended)
            bodies[(str(event.key), event.event_id)] = event.body
        return encode(event)

    def decode_restoring(data: bytes | memoryview) -> Event:
        event = decode(data)
        body = bodies.get((str(event.key), event.event_id))
        return event if body is None else replace(event, body=body)

    codec.encode = encode_remembering  # type: ignore[method-assign]
    codec.decode = decode_restoring  # type: ignore[method-assign]
    try:
        yield
    finally:
        del codec.encode, codec.decode


# Secrets a redacted or erased message must not leave behind, nor the summarizer ever send.
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds-sig"
REDACTED_DATA = "EmwKAhgBEgy3va3pzix-redacted-thinking"
ENCRYPTED = "gAAAAABo-encrypted-reasoning-content"
THINKING = "The user wants the weather in two cities: call get_weather twice."
OPAQUE = '{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"opaque-query"}}'
CALL_SIGNATURE = "gemini-thought-signature-on-call"
NATIVE_SECRETS = (SIGNATURE, REDACTED_DATA, ENCRYPTED, THINKING, OPAQUE, "opaque-query", CALL_SIGNATURE)


def thinking_answer(message_id: str = "a1", *, call_ids: tuple[str, ...] = ("toolu_1", "toolu_2")) -> MessageAppended:
    """A Claude answer with extended thinking, redacted thinking, an opaque server tool block,
    text with citations and parallel tool calls — every block type a native message can hold."""
    blocks: tuple[Block, ...] = (
        ReasoningBlock(text=THINKING, signature=SIGNATURE),
        ReasoningBlock(redacted_data=REDACTED_DATA),
        ReasoningBlock(summary=("Weather lookup",), encrypted_content=ENCRYPTED, item_id="rs_1"),
        OpaqueBlock("anthropic", OPAQUE),
        TextBlock("Let me check both cities.", extra='{"citations":[]}'),
        *(ToolCallBlock(c, "get_weather", f'{{"city":"{c}"}}', signature=CALL_SIGNATURE) for c in call_ids),
    )
    usage = Usage(prompt_tokens=1200, completion_tokens=80, cached_tokens=1000, cache_write_tokens=150)
    return native_message(message_id=message_id, role="assistant", blocks=blocks, api="anthropic",
                          provider="anthropic", model="claude-sonnet-4-5", usage=usage,
                          finish_reason="tool_calls")  # fmt: skip


def tool_result(call_id: str, text: str, *, message_id: str, is_error: bool | None = None) -> MessageAppended:
    return native_message(message_id=message_id, role="tool", blocks=(TextBlock(text),), api="anthropic",
                          provider="anthropic", tool_call_id=call_id, is_error=is_error)  # fmt: skip
