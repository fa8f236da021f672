"""The Postgres adapter of the read-model port (:class:`~query_api.ports.ReadModels`): what the
query API reads from the live projection version's schema — the inputs of a context, a user's
conversations, the audit transcript, existence and projection positions. The types it returns,
the page limits and the entries' shape are the port's (query_api/ports.py).

Every statement is parameterised; the schema (and the token columns of an encoding) are
composed as identifiers. Driver errors leave as convlog errors (:func:`~pgstore.pool.pg_errors`):
retriable ones as :class:`~projectors.errors.StoreUnavailableError`, the rest as
:class:`~projectors.errors.ProjectionError`. Nothing is retried here: the caller decides.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any, LiteralString

import orjson
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from events.blocks import blocks_from_json
from events.errors import InvalidRequestError
from events.keys import ConversationKey
from events.sealing.ports import KeyRing
from events.slot_builder import slot_builder
from events.validation import unstorable_char
from pgstore.pool import PgPool, pg_errors
from pgstore.read_sql import WINDOW_AND_CURRENT_SUMMARY
from pgstore.sealed import open_dict_row, open_sealed
from projectors.sealed_rows import RowSealer
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

__all__ = ["PostgresReadModels"]


_NEWEST = (1 << 63) - 1  # "before" of the first transcript page

# The context's inputs in ONE statement, so one snapshot by construction (no transaction to open
# or commit) and one round trip of one query: a head row (kind 0: the conversation, its window
# and current summary, as a JSON array), then the system messages (kind 1) and the newest rows
# of the range (kind 2), each in seq order. Where the range starts and how many usable turns it
# holds are the fold's decisions, read from the conversation's row (projectors/context_range.py).
_HEAD = (
    "SELECT c.epoch, c.last_partition, c.last_offset, "
    "CASE WHEN w.epoch = c.epoch THEN w.start_seq END AS window_start, c.context_start, c.usable_turns, "
    "EXISTS (SELECT FROM {s}.parked p WHERE p.conversation_key = c.conversation_key) AS parked, "
    "m.summary_id, m.text, c.summary_covers_seq AS covers, m.event_id AS summary_event, m.key_id AS summary_key, "
    "encode(m.sealed, 'hex') AS summary_sealed FROM {s}.conversations c "
    + WINDOW_AND_CURRENT_SUMMARY
    + "WHERE c.conversation_key = %(k)s"
)
_IN_RANGE = "AND seq >= (SELECT context_start FROM h) AND epoch = (SELECT epoch FROM h) AND role <> 'system' "
# StoredMessage's fields, in its order (content, tool_calls and blocks as their JSON text: parsed
# in Python, a plain string content by orjson; tool_calls is made a tuple, blocks Blocks).
_MESSAGE = (
    "NULL::text, seq, epoch, message_id, role, content::text, name, tool_calls::text, tool_call_id, "
    "reasoning_content, finish_reason, flag, redacted_at IS NOT NULL, erased_at IS NOT NULL, {tokens}, {reasoning}, "
    "image_count, blocks::text, api, provider, model, is_error, (usage ->> 'prompt_tokens')::bigint, "
    "event_id, key_id, sealed "
    "FROM {s}.transcript WHERE conversation_key = %(k)s "
)
# The head row's message columns are NULL (their types come from the other branches).
_HEAD_ROW = (
    "SELECT 0 AS kind, json_build_array(h.epoch, h.last_partition, h.last_offset, h.window_start, h.usable_turns, "
    "h.parked, h.summary_id, h.text, h.covers, h.summary_event, h.summary_key, h.summary_sealed)::text AS head, "
    "NULL AS seq" + ", NULL" * 24 + " FROM h "
)
# The newest %(n)s rows of the range (a budget rarely reaches back far; NULL is LIMIT ALL: every
# row) by the primary key, the system messages by the partial index transcript_system_messages.
_CONTEXT = (
    "WITH h AS (" + _HEAD + ") " + _HEAD_ROW + "UNION ALL (SELECT 1, " + _MESSAGE + "AND role = 'system' ORDER BY seq) "
    "UNION ALL (SELECT 2, " + _MESSAGE + _IN_RANGE + "ORDER BY seq DESC LIMIT %(n)s) "
    "ORDER BY kind, seq"
)

_TRANSCRIPT = """
SELECT t.* FROM {s}.conversations c LEFT JOIN LATERAL (
    SELECT seq, partition, "offset", event_id, message_id, role, content, name, tool_calls, tool_call_id,
           reasoning_content, thinking_duration_ms, finish_reason, model, usage, metadata, occurred_at, epoch,
           flag, tokens_o200k, tokens_cl100k, redacted_at, redaction_reason, erased_at, blocks, provider, api,
           is_error, key_id, sealed
      FROM {s}.transcript WHERE conversation_key = c.conversation_key AND seq < %s ORDER BY seq DESC LIMIT %s
) t ON true
WHERE c.conversation_key = %s ORDER BY t.seq DESC"""
_SUMMARIES = """
SELECT c.summary_seq AS current_seq, m.seq, m.partition, m."offset", m.event_id, m.summary_id, m.epoch, m.text,
       m.covers_through_message_id, m.model, m.prompt_version, m.input_tokens, m.output_tokens, m.summary_tokens,
       m.occurred_at, m.erased_at, m.key_id, m.sealed
FROM {s}.conversations c LEFT JOIN {s}.summaries m ON m.conversation_key = c.conversation_key
WHERE c.conversation_key = %s ORDER BY m.seq"""

_ITEM = """
SELECT conversation_id, title, started_at, last_activity_at, message_count, turn_count, erased_at IS NOT NULL,
       clear_count > 0, EXISTS (SELECT FROM {s}.parked p WHERE p.conversation_key = c.conversation_key),
       conversation_key, key_id, sealed
FROM {s}.conversations c WHERE tenant_id = %(tenant)s AND user_id = %(user)s"""
# The sort order mixes DESC and ASC, so "after the cursor" is no single row comparison: two
# branches that each read conversations_by_activity in order, one for active ones (empty when
# the cursor is past them: ts NULL) and one for never-active ones (last_activity_at NULL).
_LIST = """
SELECT * FROM (
    ({item} AND last_activity_at <= %(ts)s AND (last_activity_at < %(ts)s OR conversation_id > %(active_after)s)
      ORDER BY last_activity_at DESC NULLS LAST, conversation_id LIMIT %(n)s)
    UNION ALL
    ({item} AND last_activity_at IS NULL AND conversation_id > %(idle_after)s
      ORDER BY last_activity_at DESC NULLS LAST, conversation_id LIMIT %(n)s)
) page ORDER BY last_activity_at DESC NULLS LAST, conversation_id LIMIT %(n)s"""
_FAR_FUTURE = datetime.fromisoformat("9999-12-31T00:00:00+00:00")  # the first page's "ts"

# Where a conversation's records are in the log (pgstore/event_index.py), in one statement:
# one snapshot, so every record below the position it reports is in the index.
_LOGGED_AT = """
SELECT (SELECT next_offset FROM {s}.positions WHERE partition = %(p)s),
       (SELECT from_offset FROM {s}.event_index_from WHERE partition = %(p)s),
       (SELECT first_offset FROM {s}.conversations WHERE conversation_key = %(k)s),
       ARRAY(SELECT "offset" FROM {s}.event_index WHERE conversation_key = %(k)s AND partition = %(p)s
             AND (%(e)s::text IS NULL OR event_id = %(e)s) ORDER BY "offset")"""
# A version older than the index knows a message's coordinates from its transcript row only.
_MESSAGE_EVENT_AT = 'SELECT "offset" FROM {s}.transcript WHERE conversation_key = %s AND event_id = %s ORDER BY seq'


class PostgresReadModels:
    """The :class:`~query_api.ports.ReadModels` of one projection version's schema (normally the live one)."""

    def __init__(self, pool: PgPool, *, schema: str, version: int | None = None, keys: KeyRing | None = None) -> None:
        """``keys``: the data keys sealed rows are opened with (pgstore/sealed.py); without it a
        sealed row raises ``UnknownKeyError``."""
        self._pool = pool
        self._sealer = None if keys is None else RowSealer(keys)
        self.schema = schema
        self.version = version
        # Composed once: psycopg would compose a Composed again on every execute.
        self._context = {e: self._q(_CONTEXT, e).as_bytes(None) for e in ENCODINGS}
        self._transcript = self._q(_TRANSCRIPT)
        self._summaries = self._q(_SUMMARIES)
        self._list = sql.SQL(_LIST).format(item=self._q(_ITEM))

    def _q(self, text: LiteralString, encoding: str = "o200k_base") -> sql.Composed:
        suffix = "o200k" if encoding == "o200k_base" else "cl100k"
        return sql.SQL(text).format(
            s=sql.Identifier(self.schema),
            tokens=sql.Identifier(f"tokens_{suffix}"),
            reasoning=sql.Identifier(f"reasoning_tokens_{suffix}"),
        )

    async def context_inputs(
        self, key: ConversationKey, *, encoding: str, newest: int | None = None
    ) -> ContextInputs | None:
        """None when the conversation is unknown. One statement (one snapshot, one round trip, on
        a connection in autocommit: no transaction to open or close): the head, the system
        messages and the messages from the start (a primary-key range) — all of them, or with
        ``newest`` only that many of the newest."""
        statement = self._context.get(encoding)
        if statement is None:
            raise InvalidRequestError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")
        with pg_errors(f"read the context inputs of {key}"):
            async with self._pool.connection() as conn:
                await conn.set_autocommit(True)
                try:
                    rows = await (await conn.execute(statement, {"k": str(key), "n": newest})).fetchall()
                finally:
                    if not conn.closed:  # one Postgres dropped reads as closed (the pool discards it)
                        await conn.set_autocommit(False)  # as the pool's other users expect it
        if not rows:
            return None
        (epoch, partition, last_offset, window_start, usable, parked, summary_id, text, covers, *sealed) = orjson.loads(
            rows[0][1]
        )
        k = str(key)
        system = tuple(_message(r, encoding, k, self._sealer) for r in rows if r[0] == 1)
        messages = tuple(_message(r, encoding, k, self._sealer) for r in rows if r[0] == 2)
        if summary_id is not None and sealed[1] is not None:
            text = _summary_text(self._sealer, k, sealed)
        summary = None
        if summary_id is not None and covers is not None and text is not None:
            summary = StoredSummary(summary_id, text, covers, cached_counter(encoding)(text))
        if newest is None:
            return ContextInputs(key, epoch, parked, system, summary, window_start, messages, partition, last_offset)
        return ContextInputs(
            key,
            epoch,
            parked,
            system,
            summary,
            window_start,
            messages,
            partition,
            last_offset,
            complete=len(messages) < newest,
            usable_turns=usable,
        )

    async def list_conversations(
        self, tenant_id: str, user_id: str, *, limit: int = 50, before: str | None = None
    ) -> tuple[list[ConversationListItem], str | None]:
        """One user's conversations, latest user activity first (never active ones last, then by
        id), and the cursor of the next page (None on the last one). ``before`` is such a cursor;
        a malformed one raises :class:`InvalidRequestError`."""
        check_limit(limit)
        ts: datetime | None = _FAR_FUTURE
        active_after, idle_after = "", ""
        if before is not None:
            last_ts, last_id = decode_cursor(before)
            if unstorable_char(last_id) is not None:  # no stored id holds one: not a cursor we made
                raise InvalidRequestError("malformed conversation list cursor: an id Postgres cannot hold")
            ts, active_after, idle_after = (last_ts, last_id, "") if last_ts else (None, "", last_id)
        params = {
            "tenant": tenant_id,
            "user": user_id,
            "ts": ts,
            "active_after": active_after,
            "idle_after": idle_after,
            "n": limit + 1,
        }
        with pg_errors(f"list the conversations of {tenant_id}/{user_id}"):
            async with self._pool.connection() as conn:
                rows = await (await conn.execute(self._list, params)).fetchall()
        items = [self._item(row) for row in rows[:limit]]
        more = len(rows) > limit
        return items, encode_cursor(items[-1].last_activity_at, items[-1].conversation_id) if more else None

    async def transcript(
        self, key: ConversationKey, *, limit: int = 100, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None] | None:
        """The ``limit`` messages before seq ``before`` (default: the newest), oldest first, as
        JSON-ready dicts, and the ``before`` of the next older page (None: nothing older).
        None when the conversation is unknown."""
        check_limit(limit)
        k = str(key)
        with pg_errors(f"read the transcript of {k}"):
            async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(self._transcript, [_NEWEST if before is None else min(before, _NEWEST), limit + 1, k])
                rows = await cur.fetchall()
        if not rows:
            return None
        page = [r for r in rows if r["seq"] is not None]  # a known conversation with no such rows: one NULL row
        next_before = page[limit - 1]["seq"] if len(page) > limit else None
        return [
            transcript_entry(open_dict_row(self._sealer, "transcript", r, conversation_key=k))
            for r in reversed(page[:limit])
        ], next_before

    async def summaries(self, key: ConversationKey) -> list[dict[str, Any]] | None:
        """Every summary the conversation has had, oldest first, as JSON-ready dicts with a
        ``status``: ``current`` (the one contexts use), ``superseded`` (a newer one, or a new
        epoch, took over), ``withdrawn`` (a later redaction or epoch made it unusable: text
        gone) or ``erased``. None when the conversation is unknown."""
        k = str(key)
        with pg_errors(f"read the summaries of {k}"):
            async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(self._summaries, [k])
                rows = await cur.fetchall()
        if not rows:
            return None
        kept = [open_dict_row(self._sealer, "summaries", r, conversation_key=k) for r in rows if r["seq"] is not None]
        return summary_entries(kept, current=rows[0]["current_seq"])

    def _item(self, row: tuple[Any, ...]) -> ConversationListItem:
        """A list row (its title opened when sealed: the last three columns say how)."""
        *values, key, key_id, sealed = row
        if key_id is not None:
            opened = open_sealed(self._sealer, "conversations", key, event_id=None, key_id=key_id, sealed=sealed)
            values[1] = opened.values.get("title")
        return ConversationListItem(*values)

    async def conversation_exists(self, key: ConversationKey) -> bool:
        return await self.first_offset(key) is not None

    async def first_offset(self, key: ConversationKey) -> int | None:
        """The log offset of the conversation's first event (None: unknown conversation), so
        reading it back from the log skips what came before it on its partition."""
        with pg_errors(f"look up {key}"):
            async with self._pool.connection() as conn:
                q = self._q("SELECT first_offset FROM {s}.conversations WHERE conversation_key = %s")
                row = await (await conn.execute(q, [str(key)])).fetchone()
        return None if row is None else int(row[0])

    async def logged_at(self, key: ConversationKey, partition: int, *, event_id: str | None = None) -> LoggedAt:
        """The log offsets of the conversation's projected records on ``partition`` (with
        ``event_id``, only of those that carried it), and the projection's position there."""
        params = {"k": str(key), "p": partition, "e": event_id}
        with pg_errors(f"look up where {key} is in the log"):
            try:
                async with self._pool.connection() as conn:
                    row = await (await conn.execute(self._q(_LOGGED_AT), params)).fetchone()
                    assert row is not None  # scalar subqueries: always one row
                    at = LoggedAt(partition, tuple(row[3]), row[0] or 0, row[2], row[1] or 0)
                    if event_id is not None and not at.offsets and not at.indexed:
                        cur = await conn.execute(self._q(_MESSAGE_EVENT_AT), [str(key), event_id])
                        found = await cur.fetchone()  # the transcript row of the message still knows
                        at = replace(at, offsets=(found[0],) if found else ())
            except psycopg.errors.UndefinedTable:
                return await self._logged_at_without_index(key, partition)
        return at

    async def _logged_at_without_index(self, key: ConversationKey, partition: int) -> LoggedAt:
        """A version older than the index that no projector has opened since: no offsets, scan."""
        first = await self.first_offset(key)
        position = await self.projection_position(partition)
        return LoggedAt(partition, (), position, first, index_from=position if first is not None else 0)

    async def projection_position(self, partition: int) -> int:
        """The next offset the projection will apply on ``partition`` (0 before the first)."""
        with pg_errors(f"read the projection position of partition {partition}"):
            async with self._pool.connection() as conn:
                q = self._q("SELECT next_offset FROM {s}.positions WHERE partition = %s")
                row = await (await conn.execute(q, [partition])).fetchone()
        return int(row[0]) if row else 0

    async def parked_by(self, key: ConversationKey) -> ParkedBy | None:
        with pg_errors(f"read the dead letter that parks {key}"):
            async with self._pool.connection() as conn:
                q = self._q(
                    'SELECT d.id, d.partition, d."offset", d.error_code FROM {s}.parked p JOIN '
                    "{s}.dead_letters d ON d.id = p.dead_letter_id WHERE p.conversation_key = %s"
                )
                row = await (await conn.execute(q, [str(key)])).fetchone()
        return None if row is None else ParkedBy(*row)

    async def open_tool_calls(self, key: ConversationKey) -> tuple[str, ...]:
        with pg_errors(f"read the open tool calls of {key}"):
            async with self._pool.connection() as conn:
                q = self._q("SELECT open_tool_calls FROM {s}.conversations WHERE conversation_key = %s")
                row = await (await conn.execute(q, [str(key)])).fetchone()
        return () if row is None else tuple(row[0])


def _json(text: str | None) -> Any:
    """A json column's value: a string (most contents) by orjson, exact for a JSON string; the
    rest (parts, tool calls, blocks: numbers orjson would turn to floats past 64 bits) by json."""
    if text is None:
        return None
    if text[0] == '"':
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # a lone surrogate, which json reads
            pass
    return json.loads(text)


def _summary_text(sealer: RowSealer | None, key: str, sealed: list[Any]) -> str | None:
    """The current summary's text from its seal (the head's event id, key id and seal's hex)."""
    event_id, key_id, hex_seal = sealed
    seal = None if hex_seal is None else bytes.fromhex(hex_seal)
    return open_sealed(sealer, "summaries", key, event_id=event_id, key_id=key_id, sealed=seal).values.get("text")


def _open_message(values: list[Any], sealer: RowSealer | None, key: str, sealed: tuple[Any, ...]) -> None:
    """A sealed message's content columns (their text, as the statement selects them) from its
    seal, in place; a destroyed key: none, and the message reads as erased."""
    event_id, key_id, seal = sealed
    opened = open_sealed(sealer, "transcript", key, event_id=event_id, key_id=key_id, sealed=seal)
    for column, at in _MESSAGE_CONTENT:
        values[at] = opened.values.get(column)
    if opened.erased_at is not None:
        values[12] = True  # erased


# Where the content columns are among a context message's values (after the kind and the head).
_MESSAGE_CONTENT = (("content", 4), ("name", 5), ("tool_calls", 6), ("reasoning_content", 8), ("blocks", 16))


def _message(row: tuple[Any, ...], encoding: str, key: str, sealer: RowSealer | None) -> StoredMessage:
    values = list(row[2:-3])  # after the kind and the head, before the seal's columns
    if row[-2] is not None:  # a key id: the content is sealed
        _open_message(values, sealer, key, row[-3:])
    values[4] = _json(values[4])  # content
    values[6] = () if values[6] is None else tuple(json.loads(values[6]))  # tool_calls: a JSON list -> tuple of dicts
    values[16] = () if values[16] is None else blocks_from_json(values[16])  # NULL for a Chat Completions message
    if values[13] is None or values[14] is None:  # the projector does not count this encoding
        values[13], values[14] = message_counts_at_read(values[4], values[6], values[16], values[8], encoding)
    return _stored_message(values)


# ~2 us a row through the frozen dataclass's __init__, paid for every row of every context.
_stored_message = slot_builder(StoredMessage, positional=True)
