"""A transcript row's column values: the JSON of a message's parts as stored, and the text whose
tokens its content and reasoning cost (projectors.tokens owns that rule). Pure."""

from __future__ import annotations

from typing import Any, Protocol

from events.blocks import blocks_to_json
from events.event_types import Block, MessageAppended, TextPart
from events.strict_json import compact_json
from projectors import tokens


class TranscriptRow(Protocol):
    """What these functions read of a row (:class:`projectors.changes.TranscriptRow` has it; a
    Protocol here so that the state module, which builds its rows with them, is not imported)."""

    @property
    def content(self) -> Any: ...
    @property
    def tool_calls(self) -> Any: ...
    @property
    def reasoning_content(self) -> str | None: ...
    @property
    def blocks(self) -> tuple[Block, ...] | None: ...


def content_json(msg: MessageAppended) -> Any:
    if msg.content is None or isinstance(msg.content, str):
        return msg.content
    return [
        {"type": "text", "text": p.text}
        if isinstance(p, TextPart)
        else {"type": "image_url", "image_url": {"url": p.url, "detail": p.detail}}
        for p in msg.content
    ]


def tool_calls_json(msg: MessageAppended) -> Any:
    if not msg.tool_calls:
        return None
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in msg.tool_calls
    ]


def usage_json(msg: MessageAppended) -> Any:
    u = msg.usage
    if u is None:
        return None
    return {
        k: v
        for k, v in (
            ("prompt_tokens", u.prompt_tokens),
            ("completion_tokens", u.completion_tokens),
            ("cached_tokens", u.cached_tokens),
            ("reasoning_tokens", u.reasoning_tokens),
            ("cache_write_tokens", u.cache_write_tokens),
        )
        if v is not None
    }


def countable_text(row: TranscriptRow) -> str:
    """The text whose tokens the row's content and tool calls cost (projectors.tokens owns the rule)."""
    return tokens.countable_text(row.content, row.tool_calls or ())


def countable_reasoning(row: TranscriptRow) -> str:
    """The reasoning text whose tokens the row's reasoning costs (projectors.tokens owns the rule)."""
    return tokens.countable_reasoning(row.blocks or (), row.reasoning_content)


def blocks_text(row: TranscriptRow) -> str | None:
    """The ``blocks`` column: compact JSON (events.blocks.blocks_to_json), NULL without blocks."""
    return None if not row.blocks else compact_json(blocks_to_json(row.blocks))


def image_count(row: TranscriptRow) -> int:
    return tokens.image_parts(row.content)


def to_json(value: Any) -> str | None:
    return None if value is None else compact_json(value)
