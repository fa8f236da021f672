"""The Postgres side of a projection version: apply a batch of records exactly once.

One transaction per batch: lock and check the positions (a consumer that lost its partitions
finds another value and writes nothing), prefetch what the fold needs, fold, write rows with
COPY, and move the positions. A crash anywhere leaves either the whole batch or none of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from events.codec import EventCodec
from events.log import LogRecord
from projectors.errors import PositionConflictError, ProjectionError
from projectors.fold import BatchInputs, BatchOutcome, Decoded, decode_batch, fold_batch, lookups
from projectors.read_sql import SUMMARY_COVERED_SEQ
from projectors.rows import (
    CONVERSATION_COLUMNS,
    HELD_COLUMNS,
    SUMMARY_COLUMNS,
    TRANSCRIPT_COLUMNS,
    WINDOW_COLUMNS,
    TokenCounting,
    column_list,
    record_from_row,
    record_row,
    state_from_row,
    states_json,
    summary_copy_rows,
    transcript_copy_rows,
)
from projectors.state import ConversationState
from projectors.window import WindowPolicy

Cursor = AsyncCursor[Any]

# A dead letter's columns up to its error; record_row() gives the record's part of them.
_DEAD_LETTER_INSERT: LiteralString = (
    'INSERT INTO {s}.dead_letters (partition, "offset", conversation_key, record_key, record_value, headers, '
    "record_timestamp, error_code, error"
)


@dataclass(frozen=True, slots=True)
class BatchReport:
    positions: dict[int, int]  # the new next offsets of the batch's partitions
    applied: int
    duplicates: int
    dead_lettered: int
    held: int


class ProjectionStore:
    """Applies records to the read models in one Postgres schema (one projection version)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        schema: str,
        codec: EventCodec,
        counter: TokenCounting,
        policy: WindowPolicy,
        max_event_bytes: int,
        fail_fast: bool = False,
        skips: Mapping[tuple[int, int], str] | None = None,
    ) -> None:
        """``skips``: (partition, offset) -> reason of poison records an operator skipped in the
        version this one rebuilds or verifies (:func:`skip_decisions`): skipped here too."""
        self._pool = pool
        self.schema = schema
        self._codec = codec
        self._counter = counter
        self._policy = policy
        self._max_event_bytes = max_event_bytes
        self._fail_fast = fail_fast
        self._skips = dict(skips or {})

    @property
    def skips(self) -> Mapping[tuple[int, int], str]:
        return self._skips

    def _q(self, text: LiteralString) -> sql.Composed:
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    async def positions(self, partitions: Sequence[int]) -> dict[int, int]:
        """Stored next offsets; partitions never seen start at 0 (and get their row now)."""
        async with self._pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                self._q(
                    "INSERT INTO {s}.positions (partition, next_offset) SELECT p, 0 FROM unnest(%s::int[]) p "
                    "ON CONFLICT (partition) DO NOTHING"
                ),
                [list(partitions)],
            )
            await cur.execute(
                self._q("SELECT partition, next_offset FROM {s}.positions WHERE partition = ANY(%s)"),
                [list(partitions)],
            )
            return dict(await cur.fetchall())

    async def apply(
        self, records: Sequence[LogRecord], expected: Mapping[int, int], *, through: Mapping[int, int] | None = None
    ) -> BatchReport:
        """Apply ``records`` (per partition in offset order, starting at ``expected``); with
        ``through`` (partition -> the reader's next position), the positions of those partitions
        of ``expected`` move there too: past transaction markers and aborted records, which the
        reader skipped without returning them. No records: a position-only write, as guarded."""
        decoded = decode_batch(records, codec=self._codec, max_event_bytes=self._max_event_bytes)
        new_positions = {p: o for p, o in (through or {}).items() if p in expected}
        for r in records:
            new_positions[r.partition] = max(r.offset + 1, new_positions.get(r.partition, 0))
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await self._check_positions(cur, {p: expected[p] for p in new_positions})
            outcome = await self._fold(cur, decoded, parked_override=None)
            await self._write(cur, outcome)
            await self._move_positions(cur, {p: expected[p] for p in new_positions}, new_positions)
        return BatchReport(
            positions=new_positions,
            applied=len(outcome.applied_event_ids),
            duplicates=outcome.duplicates,
            dead_lettered=len(outcome.poisoned),
            held=len(outcome.held),
        )

    async def _check_positions(self, cur: Cursor, expected: Mapping[int, int]) -> None:
        await cur.execute(
            self._q("SELECT partition, next_offset FROM {s}.positions WHERE partition = ANY(%s) FOR UPDATE"),
            [sorted(expected)],
        )
        stored = {row["partition"]: row["next_offset"] for row in await cur.fetchall()}
        wrong = {p: (o, stored.get(p)) for p, o in expected.items() if stored.get(p) != o}
        if wrong:
            raise PositionConflictError(
                "positions moved under this consumer (expected, stored): "
                + ", ".join(f"p{p}: {e} != {s}" for p, (e, s) in sorted(wrong.items()))
            )

    async def _move_positions(self, cur: Cursor, expected: Mapping[int, int], new: Mapping[int, int]) -> None:
        parts = sorted(new)
        await cur.execute(
            self._q(
                "UPDATE {s}.positions AS p SET next_offset = v.next FROM unnest(%s::int[], %s::bigint[], "
                "%s::bigint[]) AS v(partition, next, expected) "
                "WHERE p.partition = v.partition AND p.next_offset = v.expected RETURNING p.partition"
            ),
            [parts, [new[p] for p in parts], [expected[p] for p in parts]],
        )
        if len(await cur.fetchall()) != len(parts):  # cannot happen under FOR UPDATE; guards a bug
            raise PositionConflictError("a position changed inside the batch transaction")

    async def _fold(self, cur: Cursor, decoded: Sequence[Decoded], *, parked_override: str | None) -> BatchOutcome:
        look = lookups(decoded)
        keys = sorted(look.keys)
        await cur.execute(
            self._q(
                "SELECT c.*, w.start_seq, w.turn_starts FROM {s}.conversations c "
                "LEFT JOIN {s}.windows w USING (conversation_key) WHERE c.conversation_key = ANY(%s)"
            ),
            [keys],
        )
        states: dict[str, ConversationState] = {
            row["conversation_key"]: state_from_row(row) for row in await cur.fetchall()
        }
        # FOR SHARE: a concurrent release of one of these conversations waits for this batch.
        await cur.execute(
            self._q("SELECT conversation_key FROM {s}.parked WHERE conversation_key = ANY(%s) FOR SHARE"),
            [keys],
        )
        parked = {row["conversation_key"] for row in await cur.fetchall()} - {parked_override}
        seen = await self._existing(cur, "event_ids", "event_id", look.event_ids)
        known = await self._existing(cur, "transcript", "message_id", look.referenced_messages)
        inputs = BatchInputs(states, frozenset(k for k in parked if k), seen, known, self._skips)
        return fold_batch(decoded, inputs, policy=self._policy, fail_fast=self._fail_fast)

    async def _existing(
        self, cur: Cursor, table: LiteralString, column: LiteralString, pairs: frozenset[tuple[str, str]]
    ) -> frozenset[tuple[str, str]]:
        if not pairs:
            return frozenset()
        keys, values = zip(*pairs, strict=True)
        # A join against the batch's pairs (index probes), not IN (...) with a DISTINCT over it.
        query = sql.SQL(
            "SELECT DISTINCT t.conversation_key, t.{c} FROM unnest(%s::text[], %s::text[]) AS v(k, id) "
            "JOIN {s}.{t} t ON t.conversation_key = v.k AND t.{c} = v.id"
        ).format(s=sql.Identifier(self.schema), t=sql.Identifier(table), c=sql.Identifier(column))
        await cur.execute(query, [list(keys), list(values)])
        return frozenset((row["conversation_key"], row[column]) for row in await cur.fetchall())

    async def _copy(self, cur: Cursor, table: LiteralString, columns: Sequence[str], rows: Sequence[Any]) -> None:
        if not rows:
            return
        statement = sql.SQL("COPY {s}.{t} ({c}) FROM STDIN").format(
            s=sql.Identifier(self.schema), t=sql.Identifier(table), c=sql.SQL(column_list(columns))
        )
        async with cur.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)

    async def _write(self, cur: Cursor, out: BatchOutcome) -> None:
        await self._copy(cur, "transcript", TRANSCRIPT_COLUMNS, transcript_copy_rows(out.transcript, self._counter))
        await self._copy(cur, "summaries", SUMMARY_COLUMNS, summary_copy_rows(out.summaries))
        await self._copy(cur, "event_ids", ("conversation_key", "event_id"), out.applied_event_ids)
        # After the COPY: a redaction or erasure may concern rows of this very batch.
        if out.redactions:
            await cur.executemany(
                self._q(
                    "UPDATE {s}.transcript SET content = NULL, reasoning_content = NULL, tool_calls = NULL, "
                    "metadata = '{{}}', redacted_at = coalesce(redacted_at, %s), "
                    "redaction_reason = coalesce(redaction_reason, %s) "
                    "WHERE conversation_key = %s AND message_id = %s"
                ),
                [(r.occurred_at, r.reason, r.conversation_key, r.message_id) for r in out.redactions],
            )
        await self._withdraw_summaries(cur, out)
        for erasure in out.erasures:
            args = (erasure.occurred_at, erasure.conversation_key, erasure.before_seq)
            await cur.execute(
                self._q(
                    "UPDATE {s}.transcript SET content = NULL, reasoning_content = NULL, tool_calls = NULL, "
                    "name = NULL, metadata = '{{}}', usage = NULL, erased_at = coalesce(erased_at, %s) "
                    "WHERE conversation_key = %s AND seq < %s"
                ),
                args,
            )
            await cur.execute(
                self._q(
                    "UPDATE {s}.summaries SET text = NULL, erased_at = coalesce(erased_at, %s) "
                    "WHERE conversation_key = %s AND seq < %s"
                ),
                args,
            )
        await self._write_states(cur, out)
        await self._write_poison(cur, out)

    async def _withdraw_summaries(self, cur: Cursor, out: BatchOutcome) -> None:
        """Summaries that may carry content no read model may keep lose their text (NULL, with
        ``erased_at`` NULL: withdrawn). Every rule depends on log order only: rebuilds agree."""
        if out.redactions:
            # The content leaves every read model: a summary recorded before the redaction that
            # covers the message may repeat it, so it is withdrawn (text NULL, erased_at NULL);
            # the context then falls back to the previous summary and the raw turns, and the
            # summarizer folds them again without it. Log order decides, so rebuilds agree.
            await cur.executemany(
                self._q(
                    "UPDATE {s}.summaries x SET text = NULL FROM {s}.transcript m "
                    "WHERE m.conversation_key = %s AND m.message_id = %s AND x.conversation_key = m.conversation_key "
                    'AND x.epoch = m.epoch AND x."offset" < %s AND x.text IS NOT NULL AND m.seq <= '
                    + SUMMARY_COVERED_SEQ
                ),
                [(r.conversation_key, r.message_id, r.offset) for r in out.redactions],
            )
        if out.summaries:
            # A summary made just before a clear or an erase lands after it: it covers the old
            # epoch and must not become the new one's summary (nor keep erased content).
            await cur.executemany(
                self._q(
                    "UPDATE {s}.summaries x SET text = NULL WHERE x.conversation_key = %s AND x.seq = %s "
                    "AND x.epoch <> (SELECT t.epoch FROM {s}.transcript t "
                    "WHERE t.conversation_key = x.conversation_key AND t.message_id = x.covers_through_message_id "
                    "ORDER BY t.seq LIMIT 1)"
                ),
                [(r.conversation_key, r.seq) for r in out.summaries],
            )
        listed = [r for r in out.summaries if r.excluded_message_ids is not None]
        if listed:
            # A summary says which redacted messages it left out; one that covers a message
            # redacted before it and does not list it was written from a stale read: withdrawn.
            # (Redactions after it withdraw it above, so the batch boundaries do not matter.)
            await cur.executemany(
                self._q(
                    "UPDATE {s}.summaries x SET text = NULL WHERE x.conversation_key = %s AND x.seq = %s "
                    "AND x.text IS NOT NULL AND EXISTS (SELECT FROM {s}.transcript r "
                    "WHERE r.conversation_key = x.conversation_key AND r.epoch = x.epoch AND r.redacted_at IS NOT NULL "
                    "AND NOT r.message_id = ANY(%s) AND r.seq <= " + SUMMARY_COVERED_SEQ + ")"
                ),
                [(r.conversation_key, r.seq, list(r.excluded_message_ids or ())) for r in listed],
            )

    async def _write_states(self, cur: Cursor, out: BatchOutcome) -> None:
        if not out.states:
            return
        conversations, windows = states_json(list(out.states.values()))
        for table, columns, rows in (
            ("conversations", CONVERSATION_COLUMNS, conversations),
            ("windows", WINDOW_COLUMNS, windows),
        ):
            updates = ", ".join(f'"{c}" = excluded."{c}"' for c in columns[1:])
            statement = sql.SQL(
                "INSERT INTO {s}.{t} ({cols}) SELECT {cols} FROM jsonb_populate_recordset(NULL::{s}.{t}, %s::jsonb) "
                "ON CONFLICT (conversation_key) DO UPDATE SET {u}"
            ).format(
                s=sql.Identifier(self.schema), t=sql.Identifier(table), cols=sql.SQL(column_list(columns)),
                u=sql.SQL(updates),
            )  # fmt: skip
            await cur.execute(statement, [rows])

    async def _write_poison(self, cur: Cursor, out: BatchOutcome) -> None:
        for poison in out.poisoned:
            row = record_row(poison.record, poison.conversation_key)
            await cur.execute(
                self._q(
                    _DEAD_LETTER_INSERT + ") VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (partition, \"offset\") DO UPDATE SET status = 'parked', error = excluded.error, "
                    "error_code = excluded.error_code, resolved_at = NULL, resolution = NULL RETURNING id"
                ),
                (*row, poison.error_code, poison.error),
            )
            fetched = await cur.fetchone()
            if poison.conversation_key is not None and fetched is not None:
                await cur.execute(
                    self._q(
                        "INSERT INTO {s}.parked (conversation_key, dead_letter_id) VALUES (%s, %s) "
                        "ON CONFLICT (conversation_key) DO UPDATE SET dead_letter_id = excluded.dead_letter_id"
                    ),
                    (poison.conversation_key, fetched["id"]),
                )
        for poison, reason in out.skipped:  # the operator's earlier decision, on the record here too
            await cur.execute(
                self._q(
                    _DEAD_LETTER_INSERT + ", status, resolution, resolved_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'skipped', %s, now()) "
                    'ON CONFLICT (partition, "offset") DO NOTHING'
                ),
                (*record_row(poison.record, poison.conversation_key), poison.error_code, poison.error, reason),
            )
        await self._copy(cur, "held_records", HELD_COLUMNS, [record_row(r, key) for key, r in out.held])

    async def resolve(self, dead_letter_id: int, *, skip_reason: str | None = None) -> BatchReport:
        """Release a parked record (apply it, then the records held behind it, in order) or skip
        it with a recorded reason (then apply the held records). If it still cannot be applied,
        nothing changes and a :class:`ProjectionError` says why."""
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            await cur.execute(self._q("SELECT * FROM {s}.dead_letters WHERE id = %s FOR UPDATE"), [dead_letter_id])
            letter = await cur.fetchone()
            if letter is None or letter["status"] != "parked":
                raise ProjectionError(f"dead letter {dead_letter_id} is not parked (unknown or already resolved)")
            key = letter["conversation_key"]
            await cur.execute(
                self._q('SELECT * FROM {s}.held_records WHERE conversation_key = %s ORDER BY partition, "offset"'),
                [key],
            )
            held = [record_from_row(row) for row in await cur.fetchall()]
            first = [] if skip_reason is not None else [record_from_row(letter)]
            decoded = decode_batch([*first, *held], codec=self._codec, max_event_bytes=self._max_event_bytes)
            if first and decoded[0].poison is not None:
                raise ProjectionError(f"dead letter {dead_letter_id} still fails: {decoded[0].poison.error}")
            outcome = await self._fold(cur, decoded, parked_override=key)
            if first and outcome.poisoned and outcome.poisoned[0].record == first[0]:
                raise ProjectionError(f"dead letter {dead_letter_id} still fails: {outcome.poisoned[0].error}")
            await cur.execute(self._q("DELETE FROM {s}.held_records WHERE conversation_key = %s"), [key])
            await cur.execute(self._q("DELETE FROM {s}.parked WHERE conversation_key = %s"), [key])
            await cur.execute(
                self._q("UPDATE {s}.dead_letters SET status = %s, resolution = %s, resolved_at = now() WHERE id = %s"),
                ["skipped" if skip_reason is not None else "released", skip_reason, dead_letter_id],
            )
            await self._write(cur, outcome)  # re-parks and re-holds if a held record fails now
        return BatchReport({}, len(outcome.applied_event_ids), outcome.duplicates, len(outcome.poisoned),
                           len(outcome.held))  # fmt: skip


async def skip_decisions(conn: AsyncConnection[Any], schema: str) -> dict[tuple[int, int], str]:
    """The records an operator skipped in ``schema`` ((partition, offset) -> reason), for a
    rebuild or a verify replay to skip too: a skip is a decision the log does not hold."""
    query = sql.SQL("SELECT partition, \"offset\", resolution FROM {}.dead_letters WHERE status = 'skipped'")
    cur = await conn.execute(query.format(sql.Identifier(schema)))
    return {(partition, offset): reason or "" for partition, offset, reason in await cur.fetchall()}
