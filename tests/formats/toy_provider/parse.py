"""Mistral, append side: a chat message object, or a list of them (one atomic batch), to neutral
messages with their blocks (text, tool calls). A convlog key ``"model"`` names an answer's model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from events.blocks import Block, TextBlock, ToolCallBlock, native_message
from events.errors import NativeFormatError
from events.event_types import MessageAppended
from events.formats import Parsed
from tests.formats.toy_provider.rules import CALL_ID, ROLES


def parse(payload: object, *, new_id: Callable[[], str]) -> Parsed:
    items = payload if isinstance(payload, list) else [payload]
    return Parsed(tuple(_message(item, f"[{i}]", new_id) for i, item in enumerate(items)))


def _message(item: Mapping[str, Any], at: str, new_id: Callable[[], str]) -> MessageAppended:
    role = item.get("role")
    if role not in ROLES:
        raise NativeFormatError(f"unknown role {role!r}", field=f"{at}.role", code="unknown_role")
    blocks: list[Block] = [TextBlock(item["content"])] if item.get("content") else []
    for j, call in enumerate(item.get("tool_calls") or ()):
        if not CALL_ID.match(call.get("id", "")):
            field = f"{at}.tool_calls[{j}].id"
            raise NativeFormatError("must be 9 letters or digits", field=field, code="invalid_tool_call_id")
        blocks.append(ToolCallBlock(call["id"], call["function"]["name"], call["function"]["arguments"]))
    calls = any(isinstance(b, ToolCallBlock) for b in blocks)
    return native_message(
        message_id=new_id(),
        role=role,
        blocks=blocks,
        api=None,  # no wire value of its own: the log's api names convlog's four (events.event_types.API_FORMATS)
        provider="mistral",
        model=item.get("model"),
        tool_call_id=item.get("tool_call_id"),
        finish_reason="tool_calls" if calls else None,
    )
