"""The event index: every record's coordinates per conversation, written with the rows.

Audit reads (``/events``, ``as_of``) fetch a conversation's records from the log by these
coordinates instead of scanning its partition, and a repeated Idempotency-Key finds the first
record that carried it. A record is indexed once, in the transaction of the batch that first
reads it, whatever the fold made of it — so the index holds exactly the records the projection
has passed, and a reader scans only what lies beyond the projection's position.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

from psycopg import AsyncConnection, AsyncCursor, sql

from projectors.fold import Decoded
from projectors.rows import index_rows

_DDL = resources.files("pgstore").joinpath("sql/event_index.sql")
INDEX_COLUMNS = ("conversation_key", "event_id", "partition", "offset")


async def ensure_event_index(conn: AsyncConnection[Any], schema: str) -> None:
    """Create the index tables of ``schema`` if it lacks them. In a version that already
    projected records (one made before the index existed) the index starts at its positions:
    readers fall back to scanning for conversations that began before that."""
    async with conn.transaction(), conn.cursor() as cur:
        await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"convlog.event_index.{schema}"])
        await cur.execute("SELECT to_regclass(%s) IS NOT NULL", [f'"{schema}".event_index'])
        row = await cur.fetchone()
        if row is not None and row[0]:
            return
        s = sql.Identifier(schema)
        await cur.execute(sql.SQL(_DDL.read_text(encoding="utf-8")).format(schema=s))
        await cur.execute(
            sql.SQL(
                "INSERT INTO {s}.event_index_from (partition, from_offset) "
                "SELECT partition, next_offset FROM {s}.positions WHERE next_offset > 0"
            ).format(s=s)
        )


@functools.lru_cache(maxsize=64)
def _copy_statement(schema: str) -> sql.Composed:
    statement = sql.SQL('COPY {s}.event_index (conversation_key, event_id, partition, "offset") FROM STDIN')
    return statement.format(s=sql.Identifier(schema))


@functools.lru_cache(maxsize=64)
def _insert_statement(schema: str) -> sql.Composed:
    statement = sql.SQL(
        'INSERT INTO {s}.event_index (conversation_key, event_id, partition, "offset") VALUES (%s, %s, %s, %s)'
    )
    return statement.format(s=sql.Identifier(schema))


async def write_event_index(
    cur: AsyncCursor[Any], schema: str, decoded: Sequence[Decoded], *, inserts: bool = False
) -> None:
    """``inserts``: as INSERTs (queued in the caller's pipeline), not COPY."""
    rows = index_rows(decoded)
    if not rows:
        return
    if inserts:
        await cur.executemany(_insert_statement(schema), rows)
        return
    async with cur.copy(_copy_statement(schema)) as copy:
        for row in rows:
            await copy.write_row(row)
