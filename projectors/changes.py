"""What event application decides, as plain rows and decisions: the transcript and summary rows
a batch adds, the redactions, erasures and summary withdrawals it applies, and which fields
each decision empties (stated once: the Postgres writer, the in-memory store and ``as_of`` all
build from these). Produced by :mod:`projectors.state`; pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.blocks import Block


@dataclass(frozen=True, slots=True)
class TranscriptRow:
    conversation_key: str
    seq: int
    partition: int
    offset: int
    event_id: str
    message_id: str
    role: str
    content: Any  # JSON: a string, OpenAI content parts, or None
    name: str | None
    tool_calls: Any  # JSON: OpenAI's nested tool_calls format, or None
    tool_call_id: str | None
    reasoning_content: str | None
    thinking_duration_ms: int | None
    finish_reason: str | None
    model: str | None
    usage: Any  # JSON or None
    metadata: dict[str, str]
    occurred_at: datetime
    epoch: int
    turn: int  # number of user messages up to and including this message's turn
    flag: str | None
    # Schema v4 (events/blocks.py): a native message's lossless blocks (None: a Chat Completions
    # message, or cleared by a redaction or an erasure), who made it, and a tool result's error.
    blocks: tuple[Block, ...] | None = None
    provider: str | None = None
    api: str | None = None
    is_error: bool | None = None
    # Issue 25: the conversation key the source record was sealed with (events.sealing); None for a
    # plain record (schema v1-v4, a plain foreign producer). A row with one is stored sealed under
    # it (projectors/sealed_rows.py): Postgres never holds its content in clear.
    key_id: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryRow:
    conversation_key: str
    seq: int  # position in the conversation's event order, like a message's
    partition: int
    offset: int
    event_id: str
    summary_id: str
    epoch: int
    text: str | None  # as recorded; None only once a withdrawal or an erasure applied (applied.py)
    covers_through_message_id: str
    model: str
    prompt_version: str
    input_tokens: int | None
    output_tokens: int | None
    summary_tokens: int | None
    occurred_at: datetime
    excluded_message_ids: tuple[str, ...] | None = None  # not stored: checked against redactions once
    key_id: str | None = None  # as TranscriptRow's: the summary's text is stored sealed under it


@dataclass(frozen=True, slots=True)
class Redaction:
    """The message's rows (every row with its id before ``before_seq``) lose what
    :data:`REDACTION_CLEARS` names."""

    conversation_key: str
    message_id: str
    reason: str
    occurred_at: datetime
    offset: int  # of the redaction
    before_seq: int  # a row appended later with the same id is not redacted, whatever the batches


@dataclass(frozen=True, slots=True)
class Erasure:
    """The conversation's rows before ``before_seq`` lose what :data:`ERASURE_CLEARS` names, and
    its summaries before it their text."""

    conversation_key: str
    occurred_at: datetime
    before_seq: int
    offset: int  # of the erase event


@dataclass(frozen=True, slots=True)
class SummaryWithdrawal:
    """Summary ``seq`` loses its text (``erased_at`` stays NULL: withdrawn, not erased): it may
    carry content no read model may keep, or belongs to an epoch that is over."""

    conversation_key: str
    seq: int


# What a redaction and an erasure take from a transcript row: the projection's UPDATEs
# (pgstore/writes.py), the in-memory tables (projectors/memory_store.py) and the in-memory
# application (projectors/applied.py) are all made from these.
# blocks hold the same content losslessly, and more that must not outlive it either: reasoning
# signatures, redacted thinking, encrypted reasoning, opaque provider blocks.
REDACTION_CLEARS = ("content", "reasoning_content", "tool_calls", "blocks")
ERASURE_CLEARS = ("content", "reasoning_content", "tool_calls", "blocks", "name", "usage")
# What both empty to {} rather than NULL (a NOT NULL JSON object), whichever of the two applies.
CLEARS_TO_EMPTY = ("metadata",)
