"""The read models of one projection version, held in memory: the tables of
pgstore/sql/read_models.sql as Python rows, for tests and tools that need no Postgres.

:class:`~projectors.memory_store.InMemoryProjectionStore` writes them (through the same fold as
the Postgres store), :class:`~query_api.memory_reads.InMemoryReadModels` reads them; neither
imports the other, as neither Postgres adapter does: these tables are what they share, like a
schema. Rows are dicts keyed by the Postgres column names, JSON columns as the JSON text the
Postgres store writes (so a reader gets fresh values, never a shared object). Pure: no driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from events.log import LogRecord
from projectors.state import ConversationState


@dataclass(slots=True)
class DeadLetter:
    id: int
    partition: int
    offset: int
    conversation_key: str | None
    record: LogRecord | None  # None: an unreadable batch (no record to keep)
    error_code: str
    error: str
    status: str = "parked"  # parked | released | skipped
    resolution: str | None = None


@dataclass(slots=True)
class MemoryTables:
    """One projection version's tables. Single-threaded: one event loop writes and reads them."""

    schema: str = "memory"
    conversations: dict[str, ConversationState] = field(default_factory=dict)  # conversations + windows
    transcript: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by conversation, seq order
    summaries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by conversation, seq order
    event_ids: set[tuple[str, str]] = field(default_factory=set)
    event_index: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)  # key -> (event id, p, offset)
    positions: dict[int, int] = field(default_factory=dict)
    dead_letters: dict[int, DeadLetter] = field(default_factory=dict)
    parked: dict[str, int] = field(default_factory=dict)  # conversation -> dead letter id
    held: dict[str, list[LogRecord]] = field(default_factory=dict)

    def dead_letter_at(self, partition: int, offset: int) -> DeadLetter | None:
        return next((d for d in self.dead_letters.values() if (d.partition, d.offset) == (partition, offset)), None)

    def next_dead_letter_id(self) -> int:
        return max(self.dead_letters, default=0) + 1


def covered_row(transcript: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any] | None:
    """The first row of the message ``summary`` covers through (projectors/read_sql.SUMMARY_COVERED)."""
    message_id = summary["covers_through_message_id"]
    return next((r for r in transcript if r["message_id"] == message_id), None)


def stamp(value: datetime | None, default: datetime) -> datetime:
    """SQL's ``coalesce(column, value)``: the first time a row was redacted or erased stays."""
    return value if value is not None else default
