"""How read-model rows and conversation states map to SQL (columns, COPY rows, upserts)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from events.keys import ConversationKey
from events.log import LogRecord
from projectors.changes import SummaryRow, TranscriptRow
from projectors.context_range import SummaryAt
from projectors.fold import Decoded
from projectors.row_values import blocks_text, countable_reasoning, countable_text, image_count, to_json
from projectors.sealed_rows import RowSealer, seal_row_values, sealed_conversation_columns
from projectors.state import ConversationState, MessageAt
from projectors.tokens import ENCODINGS
from projectors.turns import starts_turn
from projectors.window import Window


class TokenCounting(Protocol):
    @property
    def encodings(self) -> tuple[str, ...]: ...  # what it counts (CONVLOG_TOKEN_ENCODINGS)
    def count_many(self, texts: Sequence[str], encoding: str) -> list[int]: ...


TRANSCRIPT_COLUMNS = (
    "conversation_key",
    "seq",
    "partition",
    "offset",
    "event_id",
    "message_id",
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "thinking_duration_ms",
    "finish_reason",
    "model",
    "usage",
    "metadata",
    "occurred_at",
    "epoch",
    "turn",
    "flag",
    "image_count",
    "tokens_o200k",
    "tokens_cl100k",
    "reasoning_tokens_o200k",
    "reasoning_tokens_cl100k",
    "blocks",
    "provider",
    "api",
    "is_error",
    "sealed",  # the content columns' values, sealed when the source record was (sealed_rows.py)
    "key_id",
)

SUMMARY_COLUMNS = (
    "conversation_key",
    "seq",
    "partition",
    "offset",
    "event_id",
    "summary_id",
    "epoch",
    "text",
    "covers_through_message_id",
    "model",
    "prompt_version",
    "input_tokens",
    "output_tokens",
    "summary_tokens",
    "occurred_at",
    "sealed",
    "key_id",
)

CONVERSATION_COLUMNS = (
    "conversation_key",
    "tenant_id",
    "user_id",
    "conversation_id",
    "title",
    "metadata",
    "started_at",
    "last_activity_at",
    "last_event_at",
    "message_count",
    "turn_count",
    "next_seq",
    "epoch",
    "clear_count",
    "erased_at",
    "open_tool_calls",
    "answered_tool_calls",
    "last_partition",
    "last_offset",
    "first_offset",
    # What the fold decided about the context's range (projectors/context_range.py, migration 0008):
    # the readers read these, and the fold reads back all but the last two (derived from the rest).
    "summary_seq",
    "summary_covers_seq",
    "summary_covers_turn",
    "turns_before_epoch",
    "redacted_questions",
    "context_start",
    "usable_turns",
    "sealed",
    "key_id",
)

WINDOW_COLUMNS = ("conversation_key", "epoch", "start_seq", "turn_starts")

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


def transcript_copy_rows(
    rows: Sequence[TranscriptRow], counter: TokenCounting, sealer: RowSealer | None = None
) -> list[tuple[Any, ...]]:
    """Rows for COPY, with token counts computed here, once, for the whole batch: in the
    encodings ``counter`` counts; NULL in the others (a context counts them when it is read).
    A row with a key id is sealed with ``sealer`` (counts and image counts from the clear values)."""
    texts = [countable_text(r) for r in rows]
    reasoning = [countable_reasoning(r) for r in rows]
    unstored = [None] * len(rows)
    columns = (
        counter.count_many(t, encoding) if encoding in counter.encodings else unstored
        for t in (texts, reasoning)
        for encoding in ENCODINGS
    )
    counts = zip(*columns, strict=True)
    return [
        seal_row_values(
            sealer,
            "transcript",
            TRANSCRIPT_COLUMNS,
            _transcript_row(r, c),
            conversation_key=r.conversation_key,
            event_id=r.event_id,
            key_id=r.key_id,
        )
        for r, c in zip(rows, counts, strict=True)
    ]


def _transcript_row(r: TranscriptRow, counts: tuple[int | None, ...]) -> tuple[Any, ...]:
    return (
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
        *counts,
        blocks_text(r),
        r.provider,
        r.api,
        r.is_error,
        None,
        None,
    )


def summary_copy_rows(rows: Sequence[SummaryRow], sealer: RowSealer | None = None) -> list[tuple[Any, ...]]:
    return [
        seal_row_values(
            sealer,
            "summaries",
            SUMMARY_COLUMNS,
            _summary_row(r),
            conversation_key=r.conversation_key,
            event_id=r.event_id,
            key_id=r.key_id,
        )
        for r in rows
    ]


def _summary_row(r: SummaryRow) -> tuple[Any, ...]:
    return (
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
        None,
        None,
    )


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def states_json(states: Sequence[ConversationState], sealer: RowSealer | None = None) -> tuple[str, str]:
    """Conversation and window rows as JSON arrays, for one ``jsonb_populate_recordset``
    upsert per table instead of a statement per conversation (a state with a key id: its title
    and metadata sealed with ``sealer``)."""
    conversations = []
    windows = []
    for state in states:
        k = state.key
        conversations.append(
            {
                "conversation_key": str(k),
                "tenant_id": k.tenant_id,
                "user_id": k.user_id,
                "conversation_id": k.conversation_id,
                "title": state.title,
                "metadata": state.metadata,
                "started_at": _iso(state.started_at),
                "last_activity_at": _iso(state.last_activity_at),
                "last_event_at": _iso(state.last_event_at),
                "message_count": state.message_count,
                "turn_count": state.turn_count,
                "next_seq": state.next_seq,
                "epoch": state.epoch,
                "clear_count": state.clear_count,
                "erased_at": _iso(state.erased_at),
                "open_tool_calls": state.open_tool_calls,
                "answered_tool_calls": state.answered_tool_calls,
                "last_partition": state.last_at[0],
                "last_offset": state.last_at[1],
                "first_offset": state.first_offset,
                **_range_columns(state),
                **sealed_conversation_columns(sealer, str(k), state.key_id, state.title, state.metadata),
            }
        )
        windows.append(
            {
                "conversation_key": str(k),
                "epoch": state.epoch,
                "start_seq": state.window.start_seq,
                "turn_starts": state.window.turn_starts,
            }
        )
    return json.dumps(conversations, ensure_ascii=False), json.dumps(windows)


def _range_columns(state: ConversationState) -> dict[str, Any]:
    summary = state.summary
    return {
        "summary_seq": None if summary is None else summary.seq,
        "summary_covers_seq": None if summary is None else summary.covers_seq,
        "summary_covers_turn": None if summary is None else summary.covers_turn,
        "turns_before_epoch": state.turns_before_epoch,
        "redacted_questions": state.redacted_questions,
        "context_start": state.context_start,
        "usable_turns": state.usable_turns,
    }


def message_at(row: Mapping[str, Any]) -> MessageAt:
    """Where a stored transcript row is (by column name: seq, epoch, turn and role)."""
    return MessageAt(row["seq"], row["epoch"], row["turn"], starts_turn(row["role"]))


def state_from_row(row: dict[str, Any]) -> ConversationState:
    """Inverse of the conversation and window rows of :func:`states_json` (a LEFT JOIN of both tables)."""
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
        first_offset=row["first_offset"],
        summary=None
        if row["summary_seq"] is None
        else SummaryAt(row["summary_seq"], row["epoch"], row["summary_covers_seq"], row["summary_covers_turn"]),
        turns_before_epoch=row["turns_before_epoch"],
        redacted_questions=tuple(row["redacted_questions"]),
        key_id=row["key_id"],
    )


def _header_entry(name: str, value: bytes) -> list[Any]:
    """``[name, value hex]``; a name jsonb cannot hold (a foreign record's NUL) is kept as hex,
    marked by a third element, so the dead letter can still be written and the record released."""
    if "\x00" in name:
        return [name.encode("utf-8").hex(), value.hex(), "name_hex"]
    return [name, value.hex()]


def _header_from_entry(entry: Sequence[Any]) -> tuple[str, bytes]:
    name = bytes.fromhex(entry[0]).decode("utf-8") if len(entry) > 2 else entry[0]
    return name, bytes.fromhex(entry[1])


def record_row(record: LogRecord, conversation_key: str | None) -> tuple[Any, ...]:
    headers = json.dumps([_header_entry(name, value) for name, value in record.headers])
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
    headers = tuple(_header_from_entry(entry) for entry in row["headers"])
    timestamp: datetime = row["record_timestamp"].astimezone(UTC)
    return LogRecord(
        partition=row["partition"],
        offset=row["offset"],
        key=bytes(row["record_key"]),
        value=bytes(row["record_value"]),
        timestamp=timestamp,
        headers=headers,
    )


def index_rows(decoded: Sequence[Decoded]) -> list[tuple[str, str, int, int]]:
    """One row per record with a readable conversation key (no reader can ask for the others).
    Keys and event ids are storable text: a key part with a control character does not parse,
    and a decoded event passed validation."""
    return [
        (d.key, d.event.event_id if d.event is not None else "", d.record.partition, d.record.offset)
        for d in decoded
        if d.key is not None
    ]
