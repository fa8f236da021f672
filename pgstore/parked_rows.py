"""The dead-letter and parked rows of a projection version, as the store resolves them: a parked
letter locked, the records held behind it taken, the letter marked released or skipped, an
unreadable batch recorded. Statements only; what to do with them is the store's
(:mod:`pgstore.store`)."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg_pool import AsyncConnectionPool

from events.log import LogRecord
from pgstore.read_sql import in_schema
from pgstore.writes import DEAD_LETTER_INSERT
from projectors.errors import ProjectionError
from projectors.ports import UNREADABLE_BATCH
from projectors.rows import record_from_row

__all__ = [
    "letter_for_update",
    "mark_resolved",
    "parked_letter_of",
    "record_unreadable",
    "release_unreadable",
    "skip_decisions",
    "take_held",
]

Cursor = AsyncCursor[Any]


async def letter_for_update(cur: Cursor, schema: str, dead_letter_id: int) -> dict[str, Any] | None:
    """The dead letter ``dead_letter_id``, locked (``cur`` makes dict rows); None if unknown."""
    await cur.execute(in_schema(schema, "SELECT * FROM {s}.dead_letters WHERE id = %s FOR UPDATE"), [dead_letter_id])
    row: dict[str, Any] | None = await cur.fetchone()
    return row


async def parked_letter_of(cur: Cursor, schema: str, key: str) -> dict[str, Any] | None:
    """The dead letter that parks conversation ``key``, locked; None if it is not parked."""
    await cur.execute(
        in_schema(
            schema,
            "SELECT d.* FROM {s}.parked p JOIN {s}.dead_letters d ON d.id = p.dead_letter_id "
            "WHERE p.conversation_key = %s FOR UPDATE OF d",
        ),
        [key],
    )
    row: dict[str, Any] | None = await cur.fetchone()
    return row


async def take_held(cur: Cursor, schema: str, key: str) -> list[LogRecord]:
    """The records held behind conversation ``key``'s parked record, in log order, and the
    conversation unparked (rows deleted: the caller applies them in its transaction). The parked
    row is locked first: a batch holding records behind it (FOR SHARE) commits before this goes
    on, so its records are among those read."""
    await cur.execute(in_schema(schema, "SELECT FROM {s}.parked WHERE conversation_key = %s FOR UPDATE"), [key])
    await cur.execute(
        in_schema(schema, 'SELECT * FROM {s}.held_records WHERE conversation_key = %s ORDER BY partition, "offset"'),
        [key],
    )
    held = [record_from_row(row) for row in await cur.fetchall()]
    await cur.execute(in_schema(schema, "DELETE FROM {s}.held_records WHERE conversation_key = %s"), [key])
    await cur.execute(in_schema(schema, "DELETE FROM {s}.parked WHERE conversation_key = %s"), [key])
    return held


async def mark_resolved(cur: Cursor, schema: str, dead_letter_id: int, *, skip_reason: str | None) -> None:
    """Dead letter ``dead_letter_id`` released (no reason) or skipped (with its reason), now."""
    await cur.execute(
        in_schema(
            schema, "UPDATE {s}.dead_letters SET status = %s, resolution = %s, resolved_at = now() WHERE id = %s"
        ),
        ["skipped" if skip_reason is not None else "released", skip_reason, dead_letter_id],
    )


async def release_unreadable(cur: Cursor, schema: str, dead_letter_id: int, *, skip_reason: str | None) -> None:
    """An unreadable batch's dead letter released: the projector reads the partition again by
    itself once the batch can be read. It cannot be skipped (where it ends is not known)."""
    if skip_reason is not None:
        raise ProjectionError(
            f"dead letter {dead_letter_id} is an unreadable batch: where it ends is not known, so it cannot be "
            "skipped; install the codec it needs (or, if it is corrupt, delete the records up to its end with "
            "kafka-delete-records) and release it"
        )
    await cur.execute(
        in_schema(schema, "UPDATE {s}.dead_letters SET status = 'released', resolved_at = now() WHERE id = %s"),
        [dead_letter_id],
    )


async def record_unreadable(
    pool: AsyncConnectionPool[Any], schema: str, partition: int, offset: int, error: str
) -> None:
    """A dead letter for a batch of the log that cannot be read from ``offset`` on; seen again
    after a restart or a retry, it is the same dead letter, parked again."""
    async with pool.connection() as conn:
        await conn.execute(
            in_schema(
                schema,
                DEAD_LETTER_INSERT + ") VALUES (%s, %s, NULL, '', '', '[]', now(), %s, %s) "
                "ON CONFLICT (partition, \"offset\") DO UPDATE SET status = 'parked', error = excluded.error, "
                "resolved_at = NULL, resolution = NULL WHERE dead_letters.error_code = excluded.error_code",
            ),
            (partition, offset, UNREADABLE_BATCH, error.replace("\x00", "\\x00")),
        )
        await conn.commit()


async def skip_decisions(conn: AsyncConnection[Any], schema: str) -> dict[tuple[int, int], str]:
    """The records an operator skipped in ``schema`` ((partition, offset) -> reason), for a
    rebuild or a verify replay to skip too: a skip is a decision the log does not hold."""
    query = sql.SQL("SELECT partition, \"offset\", resolution FROM {}.dead_letters WHERE status = 'skipped'")
    cur = await conn.execute(query.format(sql.Identifier(schema)))
    return {(partition, offset): reason or "" for partition, offset, reason in await cur.fetchall()}
