"""Session-level advisory locks: one run of a job at a time across processes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg

from pgstore.pool import PgPool


@contextlib.asynccontextmanager
async def session_lock(pool: PgPool, name: str) -> AsyncIterator[bool]:
    """Try to take the lock ``name`` on a connection held for the whole block; yields whether it
    was taken (the block decides what a refusal means). The lock goes away with the session,
    however the process ends; releasing it on a broken connection is therefore not an error."""
    async with pool.connection() as conn:
        await conn.set_autocommit(True)
        try:
            row = await (await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [name])).fetchone()
            held = bool(row and row[0])
            try:
                yield held
            finally:
                if held:
                    with contextlib.suppress(psycopg.Error):  # a broken connection released it already
                        await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", [name])
        finally:
            with contextlib.suppress(psycopg.Error):
                await conn.set_autocommit(False)
