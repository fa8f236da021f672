"""What the summarizer reads and writes in Postgres: its own positions, the live read models'
positions, and one conversation's summary inputs (read in one snapshot).

Summaries themselves are never written here: they are events in the log, and the projections
turn them into the summary read model like any other event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import sql

from events.keys import ConversationKey
from events.sealing.ports import KeyRing
from pgstore.pool import PgPool, pg_errors
from pgstore.read_sql import KEPT_TEXT, WINDOW_AND_CURRENT_SUMMARY
from pgstore.sealed import open_sealed
from pgstore.versions import live_version
from projectors.errors import ProjectionError
from projectors.sealed_rows import RowSealer
from summarizer.plan import PreviousSummary, SummaryInputs
from summarizer.transcript import PendingMessage

_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_HEAD = (
    "SELECT c.epoch, CASE WHEN w.epoch = c.epoch THEN w.start_seq END, m.summary_id, m.text, c.summary_covers_seq, "
    "(SELECT count(*) FROM {s}.summaries x WHERE x.conversation_key = c.conversation_key AND x.epoch = c.epoch "
    "AND NOT "
    + KEPT_TEXT
    + "), m.event_id, m.key_id, m.sealed FROM {s}.conversations c "
    + WINDOW_AND_CURRENT_SUMMARY
    + "WHERE c.conversation_key = %s"
)
_PENDING = """
SELECT seq, message_id, role, content, tool_calls, tool_call_id, finish_reason,
       flag IS NULL AND redacted_at IS NULL AND erased_at IS NULL, event_id, key_id, sealed
FROM {s}.transcript
WHERE conversation_key = %s AND epoch = %s AND seq > %s AND seq < %s AND role <> 'system'
ORDER BY seq LIMIT %s"""
# Every redacted message before the window (a summary records which ones it left out).
_REDACTED = """
SELECT seq, message_id FROM {s}.transcript
WHERE conversation_key = %s AND epoch = %s AND seq < %s AND redacted_at IS NOT NULL ORDER BY seq"""


class PostgresSummaryStore:
    """The :class:`~summarizer.ports.SummaryStore` in Postgres: positions in ``convlog``, reads in a version."""

    def __init__(self, pool: PgPool, *, consumer: str, keys: KeyRing | None = None) -> None:
        """``keys``: the data keys sealed rows are opened with (pgstore/sealed.py)."""
        self._pool = pool
        self._sealer = None if keys is None else RowSealer(keys)
        self.consumer = consumer

    async def positions(
        self, partitions: Sequence[int], *, start_at: Mapping[int, int] | None = None
    ) -> tuple[dict[int, int], frozenset[int]]:
        """The next offset to look at per partition, and the partitions never read before. Those
        start at 0, or at ``start_at`` (the log's end: "latest"), which is stored at once so that
        every member, and this one after a restart, goes on from the same place."""
        with pg_errors("load the summarizer's positions"):
            async with self._pool.connection() as conn:
                select = (
                    "SELECT partition, next_offset FROM convlog.summarizer_positions "
                    "WHERE consumer = %s AND partition = ANY(%s)"
                )
                cur = await conn.execute(select, [self.consumer, list(partitions)])
                stored: dict[int, int] = dict(await cur.fetchall())
                unread = frozenset(p for p in partitions if p not in stored)
                if unread and start_at is not None:
                    async with conn.cursor() as insert:
                        await insert.executemany(
                            "INSERT INTO convlog.summarizer_positions (consumer, partition, next_offset) "
                            "VALUES (%s, %s, %s) ON CONFLICT (consumer, partition) DO NOTHING",
                            [(self.consumer, p, start_at.get(p, 0)) for p in sorted(unread)],
                        )
                    stored = dict(await (await conn.execute(select, [self.consumer, list(partitions)])).fetchall())
        return {p: stored.get(p, 0) for p in partitions}, unread

    async def save_positions(self, positions: Mapping[int, int]) -> None:
        """Store positions; they never move back (a member that lost a partition during a
        rebalance may still write an older one)."""
        if not positions:
            return
        with pg_errors("store the summarizer's positions"):
            async with self._pool.connection() as conn, conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO convlog.summarizer_positions AS s (consumer, partition, next_offset) "
                    "VALUES (%s, %s, %s) ON CONFLICT (consumer, partition) DO UPDATE "
                    "SET next_offset = GREATEST(s.next_offset, EXCLUDED.next_offset), updated_at = now()",
                    [(self.consumer, p, o) for p, o in sorted(positions.items())],
                )

    async def live_schema(self) -> str:
        with pg_errors("find the live read models"):
            async with self._pool.connection() as conn:
                live = await live_version(conn)
        if live is None:
            raise ProjectionError("no live read-models version yet: run `convlog migrate` and a projector first")
        return live.schema

    async def projection_positions(self, schema: str, partitions: Sequence[int]) -> dict[int, int]:
        """How far the read models in ``schema`` have applied each partition (0: not at all)."""
        query = sql.SQL("SELECT partition, next_offset FROM {}.positions WHERE partition = ANY(%s)").format(
            sql.Identifier(schema)
        )
        with pg_errors("read the projection's positions"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(query, [list(partitions)])
                found: dict[int, int] = dict(await cur.fetchall())
        return {p: found.get(p, 0) for p in partitions}

    async def summary_inputs(self, schema: str, key: ConversationKey, *, max_rows: int) -> SummaryInputs | None:
        """None for a conversation the read models do not know. At most ``max_rows`` pending
        messages are read (the oldest); ``complete`` says whether that was all of them."""
        s = sql.Identifier(schema)
        k = str(key)
        with pg_errors(f"read the summary inputs of {k}"):
            async with self._pool.connection() as conn:
                await conn.execute(_SNAPSHOT)
                cur = await conn.execute(sql.SQL(_HEAD).format(s=s), [k])
                head = await cur.fetchone()
                if head is None:
                    return None
                epoch, window_start, summary_id, text, covers_seq, withdrawn, event_id, key_id, sealed = head
                if key_id is not None:
                    opened = open_sealed(self._sealer, "summaries", k, event_id=event_id, key_id=key_id, sealed=sealed)
                    text = opened.values.get("text")
                previous = None
                if summary_id is not None and covers_seq is not None and text is not None:
                    previous = PreviousSummary(summary_id, text, covers_seq)
                if window_start is None:
                    return SummaryInputs(key, epoch, None, previous, (), withdrawn=withdrawn)
                after = previous.covers_through_seq if previous else -1
                cur = await conn.execute(sql.SQL(_PENDING).format(s=s), [k, epoch, after, window_start, max_rows])
                rows = await cur.fetchall()
                cur = await conn.execute(sql.SQL(_REDACTED).format(s=s), [k, epoch, window_start])
                redacted = tuple((int(seq), str(message_id)) for seq, message_id in await cur.fetchall())
        pending = tuple(_pending(self._sealer, k, r) for r in rows)
        return SummaryInputs(
            key,
            epoch,
            window_start,
            previous,
            pending,
            complete=len(rows) < max_rows,
            withdrawn=withdrawn,
            redacted=redacted,
        )


def _pending(sealer: RowSealer | None, key: str, row: tuple[Any, ...]) -> PendingMessage:
    """A pending message; a sealed one's content opened (a destroyed key: erased, not usable)."""
    seq, message_id, role, content, tool_calls, tool_call_id, finish_reason, usable, event_id, key_id, sealed = row
    if key_id is not None:
        opened = open_sealed(sealer, "transcript", key, event_id=event_id, key_id=key_id, sealed=sealed)
        content, tool_calls = (_parsed(opened.values.get(c)) for c in ("content", "tool_calls"))
        usable = usable and opened.erased_at is None
    return PendingMessage(seq, message_id, role, content, tuple(tool_calls or ()), tool_call_id, finish_reason, usable)


def _parsed(text: str | None) -> Any:
    """A json column's value as the driver parses it."""
    return None if text is None else json.loads(text)
