"""Where the readers of the log got to: each read-models version's and each summarizer's
stored next offsets (per partition)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from pgstore.pool import PgPool
from pgstore.read_sql import in_schema


@dataclass(frozen=True, slots=True)
class VersionPositions:
    projection: str
    version: int
    schema: str
    status: str  # "live" or "building" (retired versions are left out)
    positions: Mapping[int, int]  # partition -> next offset; a partition never written is absent


@dataclass(frozen=True, slots=True)
class ReaderPositions:
    versions: list[VersionPositions]  # by projection, then version
    summarizers: dict[str, dict[int, int]]  # consumer -> partition -> next offset


async def claim_positions(conn: AsyncConnection[Any], schema: str, partitions: Sequence[int]) -> dict[int, int]:
    """The projection's stored next offsets of ``partitions``; a partition never seen starts at 0
    (and gets its row now, committed with ``conn``'s autocommit or transaction)."""
    async with conn.cursor() as cur:
        await cur.execute(
            in_schema(
                schema,
                "INSERT INTO {s}.positions (partition, next_offset) SELECT p, 0 FROM unnest(%s::int[]) p "
                "ON CONFLICT (partition) DO NOTHING",
            ),
            [list(partitions)],
        )
        await cur.execute(
            in_schema(schema, "SELECT partition, next_offset FROM {s}.positions WHERE partition = ANY(%s)"),
            [list(partitions)],
        )
        return dict(await cur.fetchall())


async def positions_in(conn: AsyncConnection[Any], schema: str) -> dict[int, int]:
    """The next offset per partition stored in the version ``schema`` (in ``conn``'s transaction)."""
    cur = await conn.execute(sql.SQL("SELECT partition, next_offset FROM {}.positions").format(sql.Identifier(schema)))
    return {int(p): int(o) for p, o in await cur.fetchall()}


async def stored_positions(pool: PgPool, schema: str) -> dict[int, int]:
    """The next offset per partition the version ``schema`` stored."""
    async with pool.connection() as conn:
        return await positions_in(conn, schema)


async def reader_positions(pool: PgPool) -> ReaderPositions:
    """Every version that is not retired and every summarizer consumer, on one connection."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT projection, version, schema_name, status FROM convlog.projection_versions "
            "WHERE status <> 'retired' ORDER BY projection, version"
        )
        known = [(str(a), int(b), str(c), str(d)) for a, b, c, d in await cur.fetchall()]
        versions = [VersionPositions(p, v, s, st, await positions_in(conn, s)) for p, v, s, st in known]
        cur = await conn.execute("SELECT consumer, partition, next_offset FROM convlog.summarizer_positions")
        summarizers: dict[str, dict[int, int]] = {}
        for consumer, partition, offset in await cur.fetchall():
            summarizers.setdefault(str(consumer), {})[int(partition)] = int(offset)
    return ReaderPositions(versions, summarizers)
