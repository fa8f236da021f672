"""How read-model rows and conversation states map to SQL (columns, COPY rows, upserts)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from events.keys import ConversationKey
from events.log import LogRecord
from projectors.state import (
    ConversationState,
    SummaryRow,
    TranscriptRow,
    countable_text,
    image_count,
    to_json,
)
from projectors.window import Window


class TokenCounting(Protocol):
    def count_many(self, texts: Sequence[str], encoding: str) -> list[int]: ...


TRANSCRIPT_COLUMNS = (
    "conversation_key", "seq", "partition", "offset", "event_id", "message_id", "role", "content", "name",
    "tool_calls", "tool_call_id", "reasoning_content", "thinking_duration_ms", "finish_reason", "model",
    "usage", "metadata", "occurred_at", "epoch", "turn", "flag", "image_count", "tokens_o200k",
    "tokens_cl100k", "reasoning_tokens_o200k", "reasoning_tokens_cl100k",
)  # fmt: skip

SUMMARY_COLUMNS = (
    "conversation_key", "seq", "partition", "offset", "event_id", "summary_id", "epoch", "text",
    "covers_through_message_id", "model", "prompt_version", "input_tokens", "output_tokens",
    "summary_tokens", "occurred_at",
)  # fmt: skip

CONVERSATION_COLUMNS = (
    "conversation_key", "tenant_id", "user_id", "conversation_id", "title", "metadata", "started_at",
    "last_activity_at", "last_event_at", "message_count", "turn_count", "next_seq", "epoch", "clear_count",
    "erased_at", "open_tool_calls", "answered_tool_calls", "last_partition", "last_offset",
)  # fmt: skip

HELD_COLUMNS = (
    "partition",
    "offset",
    "conversation_key",
    "record_key",
    "record_value",
    "headers",
    "record_timestamp",
)


def column_list(columns: Sequence[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def transcript_copy_rows(rows: Sequence[TranscriptRow], counter: TokenCounting) -> list[tuple[Any, ...]]:
    """Rows for COPY, with token counts computed here, once, for the whole batch."""
    texts = [countable_text(r) for r in rows]
    reasoning = [r.reasoning_content or "" for r in rows]
    o200k, cl100k = counter.count_many(texts, "o200k_base"), counter.count_many(texts, "cl100k_base")
    r_o200k, r_cl100k = (
        counter.count_many(reasoning, "o200k_base"),
        counter.count_many(reasoning, "cl100k_base"),
    )
    return [
        (
            r.conversation_key,
            r.seq,
            r.partition,
            r.offset,
            r.event_id,
            r.message_id,
            r.role,
            to_json(r.content),
            r.name,
            to_json(r.tool_calls),
            r.tool_call_id,
            r.reasoning_content,
            r.thinking_duration_ms,
            r.finish_reason,
            r.model,
            to_json(r.usage),
            to_json(r.metadata),
            r.occurred_at,
            r.epoch,
            r.turn,
            r.flag,
            image_count(r),
            o200k[i],
            cl100k[i],
            r_o200k[i],
            r_cl100k[i],
        )
        for i, r in enumerate(rows)
    ]


def summary_copy_rows(rows: Sequence[SummaryRow]) -> list[tuple[Any, ...]]:
    return [
        (
            r.conversation_key,
            r.seq,
            r.partition,
            r.offset,
            r.event_id,
            r.summary_id,
            r.epoch,
            r.text,
            r.covers_through_message_id,
            r.model,
            r.prompt_version,
            r.input_tokens,
            r.output_tokens,
            r.summary_tokens,
            r.occurred_at,
        )
        for r in rows
    ]


def conversation_row(state: ConversationState) -> tuple[Any, ...]:
    k = state.key
    return (
        str(k), k.tenant_id, k.user_id, k.conversation_id, state.title, to_json(state.metadata),
        state.started_at, state.last_activity_at, state.last_event_at, state.message_count, state.turn_count,
        state.next_seq, state.epoch, state.clear_count, state.erased_at, list(state.open_tool_calls),
        list(state.answered_tool_calls), state.last_at[0], state.last_at[1],
    )  # fmt: skip


def window_row(state: ConversationState) -> tuple[Any, ...]:
    return (str(state.key), state.epoch, state.window.start_seq, list(state.window.turn_starts))


def state_from_row(row: dict[str, Any]) -> ConversationState:
    """Inverse of :func:`conversation_row` + :func:`window_row` (a LEFT JOIN of both tables)."""
    return ConversationState(
        key=ConversationKey(row["tenant_id"], row["user_id"], row["conversation_id"]),
        exists=True,
        title=row["title"],
        metadata=dict(row["metadata"]),
        started_at=row["started_at"],
        last_activity_at=row["last_activity_at"],
        last_event_at=row["last_event_at"],
        message_count=row["message_count"],
        turn_count=row["turn_count"],
        next_seq=row["next_seq"],
        epoch=row["epoch"],
        clear_count=row["clear_count"],
        erased_at=row["erased_at"],
        open_tool_calls=tuple(row["open_tool_calls"]),
        answered_tool_calls=tuple(row["answered_tool_calls"]),
        window=Window(row["start_seq"], tuple(row["turn_starts"] or ())),
        last_at=(row["last_partition"], row["last_offset"]),
    )


def record_row(record: LogRecord, conversation_key: str | None) -> tuple[Any, ...]:
    headers = json.dumps([[name, value.hex()] for name, value in record.headers])
    return (
        record.partition,
        record.offset,
        conversation_key,
        record.key,
        record.value,
        headers,
        record.timestamp,
    )


def record_from_row(row: dict[str, Any]) -> LogRecord:
    headers = tuple((name, bytes.fromhex(value)) for name, value in row["headers"])
    timestamp: datetime = row["record_timestamp"].astimezone(UTC)
    return LogRecord(
        partition=row["partition"], offset=row["offset"], key=bytes(row["record_key"]),
        value=bytes(row["record_value"]), timestamp=timestamp, headers=headers,
    )  # fmt: skip
