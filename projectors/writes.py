"""Writing a folded batch's rows into one projection version's tables (COPY and upserts).

Split from :mod:`projectors.store`, which owns the transaction: these run inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg import AsyncCursor, sql

from projectors.fold import BatchOutcome
from projectors.read_sql import SUMMARY_COVERED_SEQ
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

Cursor = AsyncCursor[Any]

# A dead letter's columns up to its error; record_row() gives the record's part of them.
DEAD_LETTER_INSERT: LiteralString = (
    'INSERT INTO {s}.dead_letters (partition, "offset", conversation_key, record_key, record_value, headers, '
    "record_timestamp, error_code, error"
)


class BatchWriter:
    """Writes a :class:`~projectors.fold.BatchOutcome` into the tables of schema ``schema``."""

    def __init__(self, schema: str, counter: TokenCounting) -> None:
        self.schema = schema
        self._counter = counter

    def _q(self, text: LiteralString) -> sql.Composed:
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    async def _copy(self, cur: Cursor, table: LiteralString, columns: Sequence[str], rows: Sequence[Any]) -> None:
        if not rows:
            return
        statement = sql.SQL("COPY {s}.{t} ({c}) FROM STDIN").format(
            s=sql.Identifier(self.schema), t=sql.Identifier(table), c=sql.SQL(column_list(columns))
        )
        async with cur.copy(statement) as copy:
            for row in rows:
                await copy.write_row(row)

    async def write(self, cur: Cursor, out: BatchOutcome) -> None:
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
        await self._copy(cur, "held_records", HELD_COLUMNS, [record_row(r, key) for key, r in out.held])
