"""The rules of schema v4's fields (events/validation.py): each broken once, refused with the
field that names it; the native messages of the fixtures pass."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from events.blocks import native_message
from events.errors import InvalidEventError
from events.event_types import (
    Block,
    Event,
    MediaBlock,
    MessageAppended,
    OpaqueBlock,
    ReasoningBlock,
    Role,
    TextBlock,
    ToolCall,
    ToolCallBlock,
    Usage,
)
from events.keys import ConversationKey
from events.validation import validate_event, validate_message
from tests.fixtures.events.make_fixtures import SAMPLES

KEY = ConversationKey("acme", "u1", "c1")
THINKING = ReasoningBlock(text="let me think", signature="sig")
CALL = ToolCallBlock("toolu_1", "get_weather", '{"city":"Paris"}')


def native(*blocks: Block, role: Role = "assistant", **fields: Any) -> MessageAppended:
    return native_message(**{"message_id": "m1", "role": role, "blocks": blocks, "api": "anthropic", **fields})


def refused(body: MessageAppended) -> str | None:
    with pytest.raises(InvalidEventError) as caught:
        validate_event(Event("e1", KEY, datetime.now(UTC), "test", body))
    return caught.value.field


def test_the_native_fixture_messages_pass() -> None:
    natives = [e for e in SAMPLES.values() if isinstance(e.body, MessageAppended) and e.body.blocks]
    assert len(natives) == 5
    for event in natives:
        validate_event(event)


CASES: dict[str, tuple[MessageAppended, str]] = {
    "content other than the view": (dataclasses.replace(native(TextBlock("a")), content="b"), "content"),
    "content with no text block": (dataclasses.replace(native(CALL), content="said"), "content"),
    "tool_calls other than the view": (dataclasses.replace(native(CALL), tool_calls=()), "tool_calls"),
    "tool_calls beside blocks without calls": (
        dataclasses.replace(native(TextBlock("a")), tool_calls=(ToolCall("c1", "f", "{}"),)),
        "tool_calls",
    ),
    "reasoning_content beside blocks": (
        dataclasses.replace(native(THINKING, TextBlock("a")), reasoning_content="hmm"),
        "reasoning_content",
    ),
    "reasoning in a user message": (native(THINKING, TextBlock("hi"), role="user"), "blocks[0]"),
    "a tool call in a user message": (native(TextBlock("hi"), CALL, role="user"), "blocks[1]"),
    "a tool call in a tool message": (native(TextBlock("42"), CALL, role="tool", tool_call_id="toolu_0"), "blocks[1]"),
    "empty reasoning": (native(ReasoningBlock(item_id="rs_1"), TextBlock("a")), "blocks[0]"),
    "tool call without id": (native(TextBlock("a"), dataclasses.replace(CALL, id="")), "blocks[1].id"),
    "duplicate tool call id": (native(CALL, TextBlock("a"), dataclasses.replace(CALL, name="other")), "blocks[2].id"),
    "tool call name outside the pattern": (native(dataclasses.replace(CALL, name="get weather")), "blocks[0].name"),
    "arguments not JSON": (
        native(TextBlock("a"), TextBlock("b"), dataclasses.replace(CALL, arguments="{oops")),
        "blocks[2].arguments",
    ),
    "arguments with an escaped NUL": (
        native(dataclasses.replace(CALL, arguments='{"q":"\\u0000"}')),
        "blocks[0].arguments",
    ),
    "extra not JSON": (native(TextBlock("a", extra="citations")), "blocks[0].extra"),
    "extra a JSON array": (native(TextBlock("a", extra="[]")), "blocks[0].extra"),
    "extra of a tool call not an object": (native(dataclasses.replace(CALL, extra='"x"')), "blocks[0].extra"),
    "opaque json not JSON": (native(TextBlock("a"), OpaqueBlock("anthropic", "{")), "blocks[1].json"),
    "opaque without provider": (native(TextBlock("a"), OpaqueBlock(" ", "{}")), "blocks[1].provider"),
    "media with url and data": (
        native(MediaBlock("image", url="https://x/y.png", data="AAAA", media_type="image/png"), role="user"),
        "blocks[0]",
    ),
    "media with neither url nor data": (native(MediaBlock("file"), role="user"), "blocks[0]"),
    "media data without media_type": (native(MediaBlock("file", data="AAAA"), role="user"), "blocks[0].media_type"),
    "user image of another scheme": (native(MediaBlock("image", url="ftp://x/y.png"), role="user"), "blocks[0].url"),
    "user image data of another type": (
        native(MediaBlock("image", data="AAAA", media_type="application/pdf"), role="user"),
        "blocks[0].media_type",
    ),
    "unknown api": (dataclasses.replace(native(TextBlock("a")), api="bedrock"), "api"),  # type: ignore[arg-type]
    "unknown api without blocks": (MessageAppended("m1", "user", "hi", api="vertex"), "api"),  # type: ignore[arg-type]
    "is_error on an assistant message": (native(TextBlock("a"), is_error=True), "is_error"),
    "is_error on a user message without blocks": (MessageAppended("m1", "user", "hi", is_error=False), "is_error"),
    "negative cache_write_tokens": (
        native(TextBlock("a"), usage=Usage(cache_write_tokens=-1)),
        "usage.cache_write_tokens",
    ),
    "NUL inside a block": (native(TextBlock("a"), OpaqueBlock("anthropic", '{"a":"\x00"}')), "blocks[1].json"),
    "lone surrogate in a summary": (
        native(ReasoningBlock(summary=("ok", "\ud800")), TextBlock("a")),
        "blocks[0].summary[1]",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_rule_is_refused_naming_its_field(case: str) -> None:
    body, field = CASES[case]
    assert refused(body) == field


ALLOWED: dict[str, MessageAppended] = {
    # An answer cut off while thinking, or a server tool's blocks only: stored, never served.
    "reasoning alone": native(ReasoningBlock(text="x"), role="assistant"),
    "an opaque block alone, in a question": native(OpaqueBlock("anthropic", '{"type":"document"}'), role="user"),
    "thinking, text and parallel calls": native(THINKING, TextBlock("a"), CALL, dataclasses.replace(CALL, id="t2")),
    "only tool calls": native(CALL),
    "a Responses reasoning item with an empty summary": native(
        ReasoningBlock(summary=(), item_id="rs_1"), TextBlock("a"), api="responses"
    ),
    "a tool error with an image": native(
        TextBlock("failed"),
        MediaBlock("image", data="AAAA", media_type="image/png"),
        role="tool",
        tool_call_id="toolu_1",
        is_error=True,
    ),
    "an assistant image becomes a placeholder": native(TextBlock("see"), MediaBlock("image", url="gs://b/x.png")),
    "a user file": native(
        TextBlock("read"), MediaBlock("file", data="JVBERi0", media_type="application/pdf"), role="user"
    ),
    "cut arguments of an interrupted stream": native(
        dataclasses.replace(CALL, arguments='{"ci'), finish_reason="interrupted"
    ),
    "is_error false on a tool message": native(TextBlock("ok"), role="tool", tool_call_id="t1", is_error=False),
    "extra on every modelled block": native(
        TextBlock("a", extra='{"citations":[]}'),
        dataclasses.replace(CALL, extra='{"caller":{}}'),
        ReasoningBlock(text="t", extra="{}"),
    ),
}


@pytest.mark.parametrize("case", ALLOWED)
def test_what_the_rules_allow(case: str) -> None:
    validate_message(ALLOWED[case])
