"""What ``convlog verify`` and ``convlog rebuild --verify`` read to compare versions: positions,
checksums per table and conversation, and rows as text, within one snapshot when asked.

The comparison itself (which pairs differ, what the first difference is) is the jobs'
(:mod:`convlog.ops.verifying`); this module only reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from psycopg import AsyncConnection, sql

from pgstore.parked_rows import skip_decisions
from pgstore.pool import PgPool
from pgstore.positions import positions_in
from pgstore.versions import (
    CHECKED_TABLES,
    checksums,
    compared_rows,
    index_rows_from,
    json_forms_differ,
    row_text,
    stores_jsonb,
)


class VersionReads:
    """Reads of read-models schemas on one connection (in one snapshot: see :func:`snapshot`)."""

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self._conn = conn

    async def positions(self, schema: str) -> dict[int, int]:
        return await positions_in(self._conn, schema)

    async def skip_decisions(self, schema: str) -> dict[tuple[int, int], str]:
        """The records an operator skipped in ``schema``: a decision the log does not hold."""
        return await skip_decisions(self._conn, schema)

    async def sample_keys(self, schema: str, size: int) -> list[str]:
        """``size`` conversation keys of ``schema`` drawn at random."""
        cur = await self._conn.execute(
            sql.SQL("SELECT conversation_key FROM {}.conversations ORDER BY random() LIMIT %s").format(
                sql.Identifier(schema)
            ),
            [size],
        )
        return [k for (k,) in await cur.fetchall()]

    async def moved_since(self, schema: str, floor: Mapping[int, int]) -> set[str]:
        """The conversations of ``schema`` whose last applied event is at or past ``floor`` on
        its partition (a partition not in ``floor``: from 0)."""
        cur = await self._conn.execute(
            sql.SQL(
                "SELECT c.conversation_key FROM {}.conversations c "
                "LEFT JOIN unnest(%s::int[], %s::bigint[]) AS f(partition, floor) "
                "ON f.partition = c.last_partition "
                "WHERE c.last_offset >= coalesce(f.floor, 0)"
            ).format(sql.Identifier(schema)),
            [list(floor), list(floor.values())],
        )
        return {k for (k,) in await cur.fetchall()}

    async def stores_jsonb(self, schema: str) -> bool:
        return await stores_jsonb(self._conn, schema)

    async def json_forms_differ(self, schema_a: str, schema_b: str) -> bool:
        return await json_forms_differ(self._conn, schema_a, schema_b)

    async def index_rows_from(self, *schemas: str) -> dict[int, int] | None:
        return await index_rows_from(self._conn, *schemas)

    async def checksums(
        self,
        schema: str,
        keys: Sequence[str] | None = None,
        *,
        by_value: bool,
        uncounted: Collection[str],
        index_from: Mapping[int, int] | None,
    ) -> dict[tuple[str, str], str]:
        """md5 per (table, conversation): :func:`pgstore.versions.checksums`."""
        return await checksums(self._conn, schema, keys, by_value=by_value, uncounted=uncounted, index_from=index_from)

    async def rows_as_text(
        self,
        schema: str,
        table: str,
        key: str,
        *,
        by_value: bool,
        uncounted: Collection[str],
        index_from: Mapping[int, int] | None,
    ) -> list[tuple[str, str]]:
        """(row key, row as compared) of each compared row of ``table`` for conversation ``key``,
        in key order: the rows a checksum covers."""
        order = CHECKED_TABLES[table]
        where, params = compared_rows(table, [key], index_from)
        text = row_text(by_value=by_value, uncounted=uncounted, table=table)
        query = sql.SQL("SELECT ROW({o})::text, {r} FROM {s}.{t} AS t {w} ORDER BY {o}").format(
            o=sql.SQL(order), r=text, s=sql.Identifier(schema), t=sql.Identifier(table), w=where
        )
        cur = await self._conn.execute(query, params)
        return [(k, row) for k, row in await cur.fetchall()]


@contextlib.asynccontextmanager
async def snapshot(pool: PgPool) -> AsyncIterator[VersionReads]:
    """Reads that all see one snapshot (a repeatable-read transaction): versions the live
    projector keeps writing compare as of one moment."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield VersionReads(conn)


@contextlib.asynccontextmanager
async def reads(pool: PgPool) -> AsyncIterator[VersionReads]:
    """Reads on one connection, each statement seeing what was committed when it began."""
    async with pool.connection() as conn:
        yield VersionReads(conn)
