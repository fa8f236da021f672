"""The :class:`~query_api.ports.ReadModels` over read models held in memory
(:class:`~projectors.memory_tables.MemoryTables`, written by
:class:`~projectors.memory_store.InMemoryProjectionStore`): the query API without Postgres.

Each read answers what :class:`~pgstore.reads.PostgresReadModels`' statement answers over the
same rows (the contract suite, tests/contract/test_read_models_contract.py, runs both); the SQL
a method mirrors is named in its comment. One event loop, no awaits inside a read: every read
sees one state, as the Postgres reads see one snapshot.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from events.blocks import blocks_from_json
from events.errors import InvalidRequestError
from events.keys import ConversationKey
from projectors import context_range
from projectors.memory_tables import MemoryTables
from projectors.state import ConversationState
from projectors.tokens import ENCODINGS, cached_counter, message_counts_at_read
from query_api.context_types import StoredMessage, StoredSummary
from query_api.ports import (
    ContextInputs,
    ConversationListItem,
    LoggedAt,
    ParkedBy,
    check_limit,
    decode_cursor,
    encode_cursor,
    summary_entries,
    transcript_entry,
)

__all__ = ["InMemoryReadModels"]

_SUFFIX = {"o200k_base": "o200k", "cl100k_base": "cl100k"}
_JSON_COLUMNS = ("content", "tool_calls", "usage", "metadata", "blocks")
_NEVER = datetime.min.replace(tzinfo=UTC)  # not reached: a stored conversation has started


class InMemoryReadModels:
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables
        self.schema = tables.schema
        self.version: int | None = None

    async def context_inputs(
        self, key: ConversationKey, *, encoding: str, newest: int | None = None
    ) -> ContextInputs | None:
        if encoding not in ENCODINGS:
            raise InvalidRequestError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")
        k = str(key)
        state = self.tables.conversations.get(k)
        if state is None:
            return None
        rows = self.tables.transcript.get(k, [])
        summary = self._current_summary(k, state, encoding)
        window_start = state.window.start_seq  # the windows row is written with the conversation's
        start = state.context_start  # the fold's decisions, as reads._HEAD reads them off the row
        in_range = [
            r
            for r in rows
            if context_range.in_range(r["seq"], r["epoch"], r["role"], start=start, current_epoch=state.epoch)
        ]
        system = tuple(_message(r, encoding) for r in rows if r["role"] == "system")
        parked = k in self.tables.parked
        partition, last_offset = state.last_at
        if newest is None:
            messages = tuple(_message(r, encoding) for r in in_range)
            return ContextInputs(
                key, state.epoch, parked, system, summary, window_start, messages, partition, last_offset
            )
        read = in_range[-newest:] if newest > 0 else []
        return ContextInputs(
            key,
            state.epoch,
            parked,
            system,
            summary,
            window_start,
            tuple(_message(r, encoding) for r in read),
            partition,
            last_offset,
            complete=len(read) < newest,
            usable_turns=state.usable_turns,
        )

    def _current_summary(self, key: str, state: ConversationState, encoding: str) -> StoredSummary | None:
        """read_sql.WINDOW_AND_CURRENT_SUMMARY: the summary the fold chose, by its seq."""
        if state.summary is None:
            return None
        row = next(x for x in self.tables.summaries[key] if x["seq"] == state.summary.seq)
        text = row["text"]
        return StoredSummary(row["summary_id"], text, state.summary.covers_seq, cached_counter(encoding)(text))

    async def list_conversations(
        self, tenant_id: str, user_id: str, *, limit: int = 50, before: str | None = None
    ) -> tuple[list[ConversationListItem], str | None]:
        check_limit(limit)
        after: tuple[datetime | None, str] | None = None if before is None else decode_cursor(before)
        mine = [
            s for s in self.tables.conversations.values() if (s.key.tenant_id, s.key.user_id) == (tenant_id, user_id)
        ]
        mine.sort(key=lambda s: s.key.conversation_id)
        active = [s for s in mine if s.last_activity_at is not None]
        active.sort(key=lambda s: s.last_activity_at or _NEVER, reverse=True)  # stable: ties stay by id
        ordered = active + [s for s in mine if s.last_activity_at is None]  # NULLS LAST, then by id

        def past_cursor(ts: datetime | None, conversation_id: str) -> bool:
            if after is None:
                return True
            last_ts, last_id = after
            if last_ts is None:  # the cursor is among the never active ones
                return ts is None and conversation_id > last_id
            return ts is None or ts < last_ts or (ts == last_ts and conversation_id > last_id)

        page = [s for s in ordered if past_cursor(s.last_activity_at, s.key.conversation_id)][: limit + 1]
        items = [
            ConversationListItem(
                s.key.conversation_id,
                s.title,
                s.started_at or _NEVER,
                s.last_activity_at,
                s.message_count,
                s.turn_count,
                s.erased_at is not None,
                s.clear_count > 0,
                str(s.key) in self.tables.parked,
            )
            for s in page[:limit]
        ]
        more = len(page) > limit
        return items, encode_cursor(items[-1].last_activity_at, items[-1].conversation_id) if more else None

    async def transcript(
        self, key: ConversationKey, *, limit: int = 100, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None] | None:
        check_limit(limit)
        k = str(key)
        if k not in self.tables.conversations:
            return None
        rows = [r for r in self.tables.transcript.get(k, ()) if before is None or r["seq"] < before]
        page = rows[-(limit + 1) :][::-1]  # newest first, one more than asked: is there an older page?
        next_before = page[limit - 1]["seq"] if len(page) > limit else None
        return [transcript_entry(_parsed(r)) for r in reversed(page[:limit])], next_before

    async def summaries(self, key: ConversationKey) -> list[dict[str, Any]] | None:
        k = str(key)
        state = self.tables.conversations.get(k)
        if state is None:
            return None
        current = None if state.summary is None else state.summary.seq
        return summary_entries(self.tables.summaries.get(k, []), current=current)

    async def logged_at(self, key: ConversationKey, partition: int, *, event_id: str | None = None) -> LoggedAt:
        k = str(key)
        state = self.tables.conversations.get(k)
        offsets = sorted(
            o
            for e, p, o in self.tables.event_index.get(k, ())
            if p == partition and (event_id is None or e == event_id)
        )
        first = None if state is None else state.first_offset
        return LoggedAt(partition, tuple(offsets), self.tables.positions.get(partition, 0), first)

    async def projection_position(self, partition: int) -> int:
        return self.tables.positions.get(partition, 0)

    async def parked_by(self, key: ConversationKey) -> ParkedBy | None:
        letter_id = self.tables.parked.get(str(key))
        if letter_id is None:
            return None
        letter = self.tables.dead_letters[letter_id]
        return ParkedBy(letter.id, letter.partition, letter.offset, letter.error_code)

    async def open_tool_calls(self, key: ConversationKey) -> tuple[str, ...]:
        state = self.tables.conversations.get(str(key))
        return () if state is None else state.open_tool_calls


def _parsed(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its JSON columns as values, as the Postgres driver hands ``jsonb`` back."""
    return row | {c: None if row[c] is None else json.loads(row[c]) for c in _JSON_COLUMNS}


def _message(row: dict[str, Any], encoding: str) -> StoredMessage:
    """reads._MESSAGE: a transcript row with the token counts of ``encoding`` picked out."""
    r, suffix = _parsed(row), _SUFFIX[encoding]
    tokens, reasoning_tokens = r[f"tokens_{suffix}"], r[f"reasoning_tokens_{suffix}"]
    blocks = blocks_from_json(r["blocks"])
    tool_calls = tuple(r["tool_calls"] or ())
    if tokens is None or reasoning_tokens is None:  # the projector does not count this encoding
        tokens, reasoning_tokens = message_counts_at_read(
            r["content"], tool_calls, blocks, r["reasoning_content"], encoding
        )
    return StoredMessage(
        seq=r["seq"],
        epoch=r["epoch"],
        message_id=r["message_id"],
        role=r["role"],
        content=r["content"],
        name=r["name"],
        tool_calls=tool_calls,
        tool_call_id=r["tool_call_id"],
        reasoning_content=r["reasoning_content"],
        finish_reason=r["finish_reason"],
        flag=r["flag"],
        redacted=r["redacted_at"] is not None,
        erased=r["erased_at"] is not None,
        tokens=tokens,
        reasoning_tokens=reasoning_tokens,
        image_count=r["image_count"],
        blocks=blocks,
        api=r["api"],
        provider=r["provider"],
        model=r["model"],
        is_error=r["is_error"],
        prompt_tokens=(r["usage"] or {}).get("prompt_tokens"),
    )
