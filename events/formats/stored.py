"""The stored-message types: a transcript row and the current summary, as the read models give
them to the context assembler and the renderers. Below both the append side and the serve side
(events/formats/<provider>/render.py renders them), so no format imports the query API. Plain
frozen dataclasses; no driver types. ``query_api.context_types`` re-exports them (their public
import path)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from events.blocks import Block

__all__ = ["StoredMessage", "StoredSummary"]


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One transcript row, with the token counts of the request's encoding picked out."""

    seq: int
    epoch: int
    message_id: str
    role: str
    content: Any  # a string, OpenAI content parts, or None (redacted/erased or tool-call-only)
    name: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()  # OpenAI's nested format
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    finish_reason: str | None = None
    flag: str | None = None  # kept for audit, never served
    redacted: bool = False
    erased: bool = False
    tokens: int = 0  # content text + tool calls, in the request's encoding (stored at projection)
    reasoning_tokens: int = 0
    image_count: int = 0
    # Schema v4 (events/blocks.py): the lossless blocks of a message appended in a native format
    # (empty for a Chat Completions message: events.formats.rendering.stored_blocks derives them).
    blocks: tuple[Block, ...] = ()
    api: str | None = None  # the format it was appended in (None: chat_completions)
    provider: str | None = None
    model: str | None = None
    is_error: bool | None = None
    prompt_tokens: int | None = None  # usage as reported: the whole prompt that produced this answer


@dataclass(frozen=True, slots=True)
class StoredSummary:
    summary_id: str
    text: str
    covers_through_seq: int  # the seq of the message the summary covers through
    tokens: int
