"""Writing a folded batch's rows into one projection version's tables (COPY and upserts).

Split from :mod:`pgstore.store`, which owns the transaction: these run inside it. Nothing is
decided here: which rows a redaction or an erasure clears and which summaries are withdrawn is
the fold's decision (projectors/state.py), written as it stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg import AsyncCursor, sql

from pgstore.read_sql import in_schema
from pgstore.sealed import reseal_redacted
from projectors.changes import CLEARS_TO_EMPTY, ERASURE_CLEARS, REDACTION_CLEARS
from projectors.fold import BatchOutcome
from projectors.rows import (
    CONVERSATION_COLUMNS,
    HELD_COLUMNS,
    SUMMARY_COLUMNS,
    TRANSCRIPT_COLUMNS,
    WINDOW_COLUMNS,
    TokenCounting,
    column_list,
    record_row,
    states_json,
    summary_copy_rows,
    transcript_copy_rows,
)
from projectors.sealed_rows import SEALED_COLUMNS, RowSealer

Cursor = AsyncCursor[Any]


def _clears_seal(columns: Sequence[str]) -> bool:
    """Whether a decision clearing ``columns`` leaves nothing of a sealed transcript row's
    content: then its seal goes too; else the seal is opened and sealed again without them."""
    return set(SEALED_COLUMNS["transcript"]) <= {*columns, *CLEARS_TO_EMPTY}


def _cleared(columns: Sequence[str]) -> sql.Composed:
    """``SET`` what a decision clears: ``columns`` to NULL, :data:`CLEARS_TO_EMPTY` to ``{}``,
    and the seal when that is all of a sealed row's content."""
    nulled = [*columns, "sealed"] if _clears_seal(columns) else columns
    nulls = [sql.SQL("{} = NULL").format(sql.Identifier(c)) for c in nulled]
    empties = [sql.SQL("{} = '{{}}'").format(sql.Identifier(c)) for c in CLEARS_TO_EMPTY]
    return sql.SQL(", ").join(nulls + empties)


_REDACTION_SET = _cleared(REDACTION_CLEARS)
_ERASURE_SET = _cleared(ERASURE_CLEARS)

# A dead letter's columns up to its error; record_row() gives the record's part of them.
DEAD_LETTER_INSERT: LiteralString = (
    'INSERT INTO {s}.dead_letters (partition, "offset", conversation_key, record_key, record_value, headers, '
    "record_timestamp, error_code, error"
)


def state_upsert(schema: str, table: str, columns: Sequence[str]) -> sql.Composed:
    """Upsert the ``table`` rows of a JSON array (one parameter; :func:`~projectors.rows.states_json`)."""
    return sql.SQL(
        "INSERT INTO {s}.{t} ({cols}) SELECT {cols} FROM jsonb_populate_recordset(NULL::{s}.{t}, %s::jsonb) "
        "ON CONFLICT (conversation_key) DO UPDATE SET {u}"
    ).format(
        s=sql.Identifier(schema),
        t=sql.Identifier(table),
        cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
        u=sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c)) for c in columns[1:]),
    )


class BatchWriter:
    """Writes a :class:`~projectors.fold.BatchOutcome` into the tables of schema ``schema``."""

    def __init__(self, schema: str, counter: TokenCounting, *, sealer: RowSealer | None = None) -> None:
        self.schema = schema
        self._counter = counter
        self._sealer = sealer
        # Statements composed once (formatting parses the template on every call).
        self._statements: dict[Any, bytes] = {}

    def _q(self, text: LiteralString) -> bytes:
        return in_schema(self.schema, text)

    async def _copy(
        self, cur: Cursor, table: LiteralString, columns: Sequence[str], rows: Sequence[Any], *, inserts: bool = False
    ) -> None:
        """``rows`` into ``table``: by COPY, or with ``inserts`` one INSERT per row (queued in
        the caller's pipeline: COPY cannot be pipelined, and for a few rows its own round trips
        cost more than the INSERTs)."""
        if not rows:
            return
        if inserts:
            await cur.executemany(self._insert(table, columns), rows)
            return
        statement = self._statements.get((table, *columns))
        if statement is None:
            statement = self._statements[(table, *columns)] = (
                sql.SQL("COPY {s}.{t} ({c}) FROM STDIN")
                .format(s=sql.Identifier(self.schema), t=sql.Identifier(table), c=sql.SQL(column_list(columns)))
                .as_bytes(None)
            )
        async with cur.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)

    def _insert(self, table: LiteralString, columns: Sequence[str]) -> bytes:
        statement = self._statements.get(("insert", table, *columns))
        if statement is None:
            statement = self._statements[("insert", table, *columns)] = (
                sql.SQL("INSERT INTO {s}.{t} ({c}) VALUES ({v})")
                .format(
                    s=sql.Identifier(self.schema),
                    t=sql.Identifier(table),
                    c=sql.SQL(column_list(columns)),
                    v=sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                )
                .as_bytes(None)
            )
        return statement

    async def write(
        self, cur: Cursor, out: BatchOutcome, *, counter: TokenCounting | None = None, inserts: bool = False
    ) -> None:
        """``counter``: instead of the writer's own (one answering from counts made ahead).
        ``inserts``: rows go as INSERTs, not COPY (for a small batch in a pipeline)."""
        rows = transcript_copy_rows(out.transcript, counter or self._counter, self._sealer)
        await self._copy(cur, "transcript", TRANSCRIPT_COLUMNS, rows, inserts=inserts)
        summaries = summary_copy_rows(out.summaries, self._sealer)
        await self._copy(cur, "summaries", SUMMARY_COLUMNS, summaries, inserts=inserts)
        await self._copy(cur, "event_ids", ("conversation_key", "event_id"), out.applied_event_ids, inserts=inserts)
        # After the COPY: a decision may concern rows of this very batch. Each one names its
        # rows (projectors/state.py decided them); nothing is decided here.
        if out.redactions:
            await cur.executemany(
                self._set(
                    _REDACTION_SET,
                    "redacted_at = coalesce(redacted_at, %s), "
                    "redaction_reason = coalesce(redaction_reason, %s) "
                    "WHERE conversation_key = %s AND message_id = %s AND seq < %s",
                ),
                [(r.occurred_at, r.reason, r.conversation_key, r.message_id, r.before_seq) for r in out.redactions],
            )
            if not _clears_seal(REDACTION_CLEARS):
                await reseal_redacted(cur, self.schema, self._sealer, out.redactions)
        if out.withdrawals:
            await cur.execute(
                self._q(
                    "UPDATE {s}.summaries x SET text = NULL, sealed = NULL "
                    "FROM unnest(%s::text[], %s::bigint[]) AS v(k, seq) "
                    "WHERE x.conversation_key = v.k AND x.seq = v.seq"
                ),
                [[w.conversation_key for w in out.withdrawals], [w.seq for w in out.withdrawals]],
            )
        for erasure in out.erasures:
            args = (erasure.occurred_at, erasure.conversation_key, erasure.before_seq)
            await cur.execute(
                self._set(_ERASURE_SET, "erased_at = coalesce(erased_at, %s) WHERE conversation_key = %s AND seq < %s"),
                args,
            )
            await cur.execute(
                self._q(
                    "UPDATE {s}.summaries SET text = NULL, sealed = NULL, erased_at = coalesce(erased_at, %s) "
                    "WHERE conversation_key = %s AND seq < %s"
                ),
                args,
            )
        await self._write_states(cur, out)
        await self._write_poison(cur, out, inserts=inserts)

    def _set(self, cleared: sql.Composable, rest: LiteralString) -> sql.Composed:
        """``UPDATE transcript SET`` the ``cleared`` columns to NULL, then ``rest``."""
        return sql.SQL("UPDATE {s}.transcript SET {cleared}, " + rest).format(
            s=sql.Identifier(self.schema), cleared=cleared
        )

    async def _write_states(self, cur: Cursor, out: BatchOutcome) -> None:
        if not out.states:
            return
        conversations, windows = states_json(list(out.states.values()), self._sealer)
        for table, columns, rows in (
            ("conversations", CONVERSATION_COLUMNS, conversations),
            ("windows", WINDOW_COLUMNS, windows),
        ):
            if ("upsert", table) not in self._statements:
                self._statements["upsert", table] = state_upsert(self.schema, table, columns).as_bytes(None)
            await cur.execute(self._statements["upsert", table], [rows])

    async def _write_poison(self, cur: Cursor, out: BatchOutcome, *, inserts: bool) -> None:
        for poison in out.poisoned:
            row = record_row(poison.record, poison.conversation_key)
            await cur.execute(
                self._q(
                    DEAD_LETTER_INSERT + ") VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (partition, \"offset\") DO UPDATE SET status = 'parked', error = excluded.error, "
                    "error_code = excluded.error_code, resolved_at = NULL, resolution = NULL RETURNING id"
                ),
                # An error text quoting a record's NUL must not get the dead letter itself refused.
                (*row, poison.error_code, poison.error.replace("\x00", "\\x00")),
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
                    DEAD_LETTER_INSERT + ", status, resolution, resolved_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'skipped', %s, now()) "
                    'ON CONFLICT (partition, "offset") DO NOTHING'
                ),
                (*record_row(poison.record, poison.conversation_key), poison.error_code, poison.error, reason),
            )
        await self._copy(
            cur, "held_records", HELD_COLUMNS, [record_row(r, key) for key, r in out.held], inserts=inserts
        )
