"""Read-models schemas made and dropped outside the version registry (a verify's scratch
schema), and the drop a registered version's schema shares."""

from __future__ import annotations

from importlib import resources
from typing import Any

from psycopg import AsyncConnection, sql

from pgstore.pool import PgPool


async def create_read_models_schema(pool: PgPool, schema: str) -> None:
    """``schema`` with today's read-models tables (``pgstore/sql/read_models.sql``), unregistered."""
    ddl = resources.files("pgstore").joinpath("sql/read_models.sql").read_text(encoding="utf-8")
    async with pool.connection() as conn:
        await conn.execute(sql.SQL(ddl).format(schema=sql.Identifier(schema)))


async def drop_schema_in(conn: AsyncConnection[Any], schema: str) -> None:
    """``DROP SCHEMA … CASCADE`` of ``schema`` if it exists, in ``conn``'s transaction."""
    await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def drop_schema(pool: PgPool, schema: str) -> None:
    async with pool.connection() as conn:
        await drop_schema_in(conn, schema)
