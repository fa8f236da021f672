"""Statements about a Postgres server itself, not its read models: whose data directory it
serves, creating a database, answering at all. Synchronous (the embedded server's start waits
with them, before any event loop) except :func:`ping` (readiness, through the pool)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgstore.pool import PgPool
from projectors.errors import StoreUnavailableError

__all__ = ["data_directory", "ensure_database", "ping"]


def data_directory(admin_url: str) -> str:
    """The data directory of the server that answers at ``admin_url`` (``SHOW data_directory``).
    A server that does not answer yet: :class:`StoreUnavailableError` (retriable)."""
    try:
        with psycopg.connect(admin_url, connect_timeout=2, autocommit=True) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
    except psycopg.Error as e:
        raise StoreUnavailableError(f"Postgres does not answer yet: {e}") from e
    return "?" if row is None else str(row[0])


def ensure_database(admin_url: str, url: str, database: str) -> None:
    """Create ``database`` through ``admin_url`` unless it exists, then connect to ``url``.
    A server that does not answer yet: :class:`StoreUnavailableError` (retriable)."""
    try:
        with psycopg.connect(admin_url, connect_timeout=2, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1").fetchone()
    except psycopg.Error as e:
        raise StoreUnavailableError(f"Postgres does not answer yet: {e}") from e


async def ping(pool: PgPool, *, timeout_s: float = 2.0) -> None:
    """One trivial statement through ``pool``: the driver's error, if any, as is (readiness
    reports its text)."""
    async with pool.connection(timeout=timeout_s) as conn:
        await conn.execute("SELECT 1")
