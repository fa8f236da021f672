"""The read-model port: what the query API reads from a projection version's read models, and
the pure types it gets back. No driver here.

Adapters: :class:`pgstore.reads.PostgresReadModels` (the live schema in Postgres) and
:class:`query_api.memory_reads.InMemoryReadModels` (tables kept in memory by
:class:`projectors.memory_store.InMemoryProjectionStore`, folded by the same pure functions), both
run through one contract suite (tests/contract/test_read_models_contract.py). Page limits and
the conversation list's cursor belong to the port: every adapter pages alike.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from events.errors import InvalidRequestError
from events.keys import ConversationKey
from events.strict_json import compact_json, parse_json
from query_api.context_types import StoredMessage, StoredSummary

__all__ = [
    "MAX_CURSOR_CHARS",
    "MAX_PAGE",
    "ContextInputs",
    "ConversationListItem",
    "LoggedAt",
    "ParkedBy",
    "ReadModels",
    "check_limit",
    "decode_cursor",
    "encode_cursor",
    "summary_entries",
    "transcript_entry",
]

MAX_PAGE = 1000
MAX_CURSOR_CHARS = 2048


@dataclass(frozen=True, slots=True)
class ContextInputs:
    """What a context is assembled from (query_api.context.assemble), read in one snapshot."""

    conversation_key: ConversationKey
    epoch: int
    parked: bool  # the projection holds records of this conversation back: the context may be stale
    system: tuple[StoredMessage, ...]  # every system message, any epoch, in seq order
    summary: StoredSummary | None  # the current epoch's latest summary that was not erased
    window_start: int | None
    messages: tuple[StoredMessage, ...]  # non-system, current epoch, from min(window, after summary)
    partition: int
    last_offset: int  # the log position the read models reflect for this conversation
    complete: bool = True  # messages reach back to the start (False: only the newest were read)
    usable_turns: int | None = None  # with complete=False: the turns from the start a context may use


@dataclass(frozen=True, slots=True)
class LoggedAt:
    """Where a conversation's records are in the log, as the read models know it."""

    partition: int
    offsets: tuple[int, ...]  # of its records below ``projected``, ascending (the event index)
    projected: int  # the projection's next offset on the partition: records from here on are not indexed yet
    first_offset: int | None  # of its first event, once projected
    index_from: int = 0  # the index starts here on the partition (a version made before it existed)

    @property
    def indexed(self) -> bool:
        """Every projected record of the conversation is in ``offsets`` (else scan from its first)."""
        return self.first_offset is None or self.first_offset >= self.index_from


@dataclass(frozen=True, slots=True)
class ParkedBy:
    """The dead letter that parks a conversation: its id, where its record is in the log, and why."""

    dead_letter_id: int
    partition: int
    offset: int
    error_code: str


@dataclass(frozen=True, slots=True)
class ConversationListItem:
    conversation_id: str
    title: str | None
    started_at: datetime
    last_activity_at: datetime | None
    message_count: int
    turn_count: int
    erased: bool
    cleared: bool
    parked: bool


class ReadModels(Protocol):
    """Reads of one projection version's read models (normally the live one): exactly what the
    query API asks. Unknown conversations are None, not errors; a store that cannot answer
    raises a :class:`~events.errors.ConvlogError` (retriable when trying again may help)."""

    # The number of the read-models version read (None: not a numbered version, as in memory):
    # a live context names it, so that an audit rebuilds it with that version's window.
    version: int | None

    async def context_inputs(
        self, key: ConversationKey, *, encoding: str, newest: int | None = None
    ) -> ContextInputs | None:
        """The inputs of the conversation's context, read in one snapshot (None: unknown). With
        ``newest``, only that many of the range's newest messages (``complete`` says whether that
        was all, ``usable_turns`` how many turns the whole range offers). InvalidRequestError for an
        encoding other than :data:`~projectors.tokens.ENCODINGS`."""
        ...

    async def list_conversations(
        self, tenant_id: str, user_id: str, *, limit: int = 50, before: str | None = None
    ) -> tuple[list[ConversationListItem], str | None]:
        """One user's conversations, latest user activity first (never active ones last, then by
        id), and the cursor of the next page (None on the last one). ``before`` is such a cursor;
        a malformed one raises InvalidRequestError."""
        ...

    async def transcript(
        self, key: ConversationKey, *, limit: int = 100, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None] | None:
        """The ``limit`` messages before seq ``before`` (default: the newest), oldest first, as
        JSON-ready dicts, and the ``before`` of the next older page (None: nothing older).
        None when the conversation is unknown."""
        ...

    async def summaries(self, key: ConversationKey) -> list[dict[str, Any]] | None:
        """Every summary the conversation has had, oldest first, as JSON-ready dicts with a
        ``status``: ``current``, ``superseded``, ``withdrawn`` (text gone) or ``erased``.
        None when the conversation is unknown."""
        ...

    async def logged_at(self, key: ConversationKey, partition: int, *, event_id: str | None = None) -> LoggedAt:
        """The log offsets of the conversation's projected records on ``partition`` (with
        ``event_id``, only of those that carried it), and the projection's position there."""
        ...

    async def projection_position(self, partition: int) -> int:
        """The next offset the projection will apply on ``partition`` (0 before the first)."""
        ...

    async def parked_by(self, key: ConversationKey) -> ParkedBy | None:
        """The dead letter that parks the conversation (None: it is not parked)."""
        ...

    async def open_tool_calls(self, key: ConversationKey) -> tuple[str, ...]:
        """The call ids of the conversation's latest assistant message that no tool message has
        answered yet, as projected (empty for an unknown conversation): what a tool result
        appended next may answer."""
        ...


def encode_cursor(last_activity_at: datetime | None, conversation_id: str) -> str:
    """An opaque cursor: at most 1,450 characters for a 256-character conversation id."""
    value = [last_activity_at.isoformat() if last_activity_at else None, conversation_id]
    raw = compact_json(value)
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime | None, str]:
    """Inverse of :func:`encode_cursor`; :class:`InvalidRequestError` for anything it did not make."""
    try:
        return _parse_cursor(cursor)
    except (ValueError, TypeError, binascii.Error) as e:  # JSON and Unicode errors are ValueErrors
        raise InvalidRequestError(f"malformed conversation list cursor {cursor[:64]!r}: {e}") from e


def _parse_cursor(cursor: str) -> tuple[datetime | None, str]:
    if len(cursor) > MAX_CURSOR_CHARS:
        raise ValueError("too long")
    raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
    value = parse_json(raw.decode("utf-8"))  # client text: strictly, like every JSON a client sends
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str) and value[1]):
        raise ValueError("not a [last_activity_at, conversation_id] pair")
    ts = None if value[0] is None else datetime.fromisoformat(value[0])
    if ts is not None and ts.tzinfo is None:
        raise ValueError("timestamp without a time zone")
    return ts, value[1]


def check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequestError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")


# A transcript entry's and a summary entry's fields as stored (each adapter reads them by name).
_ENTRY_FIELDS = (
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
    "epoch",
    "flag",
)
_V4_ENTRY_FIELDS = ("blocks", "provider", "api", "is_error")  # blocks: events.blocks.blocks_to_json's form
_SUMMARY_FIELDS = (
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
)


def transcript_entry(r: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-ready entry of :meth:`ReadModels.transcript` for a transcript row (by column name)."""
    entry = {f: r[f] for f in _ENTRY_FIELDS}
    entry["occurred_at"] = r["occurred_at"].isoformat()
    entry["tokens"] = {"o200k_base": r["tokens_o200k"], "cl100k_base": r["tokens_cl100k"]}
    redacted_at, erased_at = r["redacted_at"], r["erased_at"]
    entry["redacted"] = {"at": redacted_at.isoformat(), "reason": r["redaction_reason"]} if redacted_at else None
    entry["erased_at"] = erased_at.isoformat() if erased_at else None
    for f in _V4_ENTRY_FIELDS:  # a native message's (schema v4): only when set, as most rows have none
        if r[f] is not None:
            entry[f] = r[f]
    return entry


def summary_entries(rows: Sequence[Mapping[str, Any]], *, current: int | None) -> list[dict[str, Any]]:
    """The entries of :meth:`ReadModels.summaries` for a conversation's summary rows in seq order:
    ``current`` is the seq of the one the fold chose (the conversation's ``summary_seq``)."""
    return [_summary_entry(r, current) for r in rows]


def _summary_entry(r: Mapping[str, Any], current: int | None) -> dict[str, Any]:
    entry = {f: r[f] for f in _SUMMARY_FIELDS}
    entry["occurred_at"] = r["occurred_at"].isoformat()
    entry["erased_at"] = r["erased_at"].isoformat() if r["erased_at"] else None
    if r["erased_at"] is not None:
        entry["status"] = "erased"
    elif r["text"] is None:
        entry["status"] = "withdrawn"
    else:
        entry["status"] = "current" if r["seq"] == current else "superseded"
    return entry
