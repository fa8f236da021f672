"""The dead letters of a read-models version: parked records, listed or read one at a time.
(Releasing and skipping one is the projector store's own code: ``PostgresProjectionStore.resolve``.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from pgstore.pool import PgPool

# The records of the same conversation waiting behind dead letter ``d`` (the one statement of it).
_HELD = sql.SQL(
    "(SELECT count(*) FROM {s}.held_records h JOIN {s}.parked p USING (conversation_key) WHERE p.dead_letter_id = d.id)"
)


@dataclass(frozen=True, slots=True)
class DeadLetterSummary:
    id: int
    status: str
    partition: int
    offset: int
    conversation_key: str | None
    error_code: str
    error: str
    created_at: datetime
    held: int  # records of the same conversation waiting behind it


async def dead_letter_summaries(pool: PgPool, schema: str, *, status: str | None) -> list[DeadLetterSummary]:
    """The dead letters of ``schema`` with ``status`` (None: all), by id."""
    s = sql.Identifier(schema)
    query = sql.SQL(
        'SELECT d.id, d.status, d.partition, d."offset", d.conversation_key, d.error_code, d.error, d.created_at, '
        "{held} FROM {s}.dead_letters d WHERE %(status)s::text IS NULL OR d.status = %(status)s ORDER BY d.id"
    ).format(held=_HELD.format(s=s), s=s)
    async with pool.connection() as conn:
        rows = await (await conn.execute(query, {"status": status})).fetchall()
    return [DeadLetterSummary(*row) for row in rows]


async def dead_letter_row(pool: PgPool, schema: str, dead_letter_id: int) -> dict[str, Any] | None:
    """Every column of the dead letter (the parked record's too), and ``held``: the records of
    the same conversation waiting behind it. None: no such dead letter."""
    s = sql.Identifier(schema)
    query = sql.SQL("SELECT d.*, {held} AS held FROM {s}.dead_letters d WHERE d.id = %s").format(
        held=_HELD.format(s=s), s=s
    )
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, [dead_letter_id])
        return await cur.fetchone()
