"""The projector's Postgres sessions bound what they wait for (real Postgres).

A pool opened with :class:`~pgstore.pool.SessionLimits` has them on every session, with TCP
keepalives on both ends; a lock wait past ``lock_timeout`` is a retriable error that
:func:`~pgstore.pool.retrying` waits out; a transaction idle past its bound is ended by Postgres
(its locks released); one frozen inside a COPY — which no Postgres timeout interrupts — is ended
by :func:`~pgstore.stalled_sessions.end_stalled_blockers` once it blocks another session of
the same application, and only then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from convlog.runtime.projecting import projector_session_limits
from convlog.settings import Settings
from events.errors import ConvlogError
from pgstore.pool import PgPool, SessionLimits, open_pool, pg_errors, retrying
from pgstore.stalled_sessions import end_stalled_blockers
from projectors.errors import StoreUnavailableError
from tests.projection_support import temporary_database

pytestmark = pytest.mark.postgres

APP = "convlog-limits-test"


@pytest.fixture
async def positions_database_url(pg_admin_url: str) -> AsyncIterator[str]:
    async with temporary_database(pg_admin_url) as url:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("CREATE TABLE positions (partition int PRIMARY KEY, next_offset bigint)")
            await conn.execute("INSERT INTO positions VALUES (0, 0)")
        yield url


@pytest.fixture
async def limited_pool(positions_database_url: str) -> AsyncIterator[PgPool]:
    limits = SessionLimits(lock_timeout_s=0.5, statement_timeout_s=5, idle_in_transaction_timeout_s=1.0)
    pool = await open_pool(positions_database_url, max_size=3, name=APP, limits=limits)
    yield pool
    await pool.close()


async def _settings(pool: PgPool, *names: str) -> list[str]:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT " + ", ".join(f"current_setting('{n}')" for n in names))).fetchone()
        assert row is not None
        return list(row)


def test_the_projector_limits_come_from_the_settings_and_default_to_bounds() -> None:
    assert projector_session_limits(Settings()) == SessionLimits(10.0, 60.0, 30.0)
    limits = projector_session_limits(Settings(projector_lock_timeout_s=2, projector_idle_in_transaction_timeout_s=0))
    assert limits.server_settings()["lock_timeout"] == "2000"
    assert "idle_in_transaction_session_timeout" not in limits.server_settings()  # 0: Postgres' default


async def test_every_session_has_the_limits_and_keepalives_at_both_ends(limited_pool: PgPool) -> None:
    names = ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")
    assert await _settings(limited_pool, *names) == ["500ms", "5s", "1s"]
    async with limited_pool.connection() as conn:  # the client's end: libpq's parameters
        params = conn.info.get_parameters()
        assert (params["keepalives"], params["keepalives_idle"], params["keepalives_count"]) == ("1", "10", "3")
    # The server's end, on a TCP connection (the tests' Postgres is on 127.0.0.1).
    assert await _settings(limited_pool, "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count") == [
        "10",
        "5",
        "3",
    ]


async def test_a_pool_without_limits_keeps_postgres_defaults(positions_database_url: str) -> None:
    pool = await open_pool(positions_database_url, max_size=1, name=APP)
    try:
        assert await _settings(pool, "lock_timeout", "idle_in_transaction_session_timeout") == ["0", "0"]
    finally:
        await pool.close()


async def test_a_lock_wait_past_the_timeout_is_retriable_and_retried(
    limited_pool: PgPool, positions_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(positions_database_url) as holder:
        await holder.execute("SELECT * FROM positions FOR UPDATE")  # held while the batch below waits

        async def batch() -> int:
            async with limited_pool.connection() as conn:
                row = await (await conn.execute("SELECT next_offset FROM positions FOR UPDATE")).fetchone()
                assert row is not None
                return int(row[0])

        with pytest.raises(StoreUnavailableError, match="55P03") as info, pg_errors("applying a batch"):
            await batch()
        assert info.value.retriable

        retried: list[str] = []

        def note(attempt: int, error: ConvlogError, delay: float) -> None:
            retried.append(error.code)

        waiting = asyncio.create_task(retrying(batch, action="applying a batch", base_delay_s=0.05, on_retry=note))
        await asyncio.sleep(1.2)  # two lock timeouts, at least
        await holder.rollback()
        assert await asyncio.wait_for(waiting, 5) == 0
        assert retried
        assert set(retried) == {"store_unavailable"}


async def test_a_transaction_left_idle_is_ended_and_its_locks_released(limited_pool: PgPool) -> None:
    async with limited_pool.connection() as frozen:
        await frozen.execute("SELECT * FROM positions FOR UPDATE")
        await asyncio.sleep(1.5)  # a frozen client: past idle_in_transaction_session_timeout
        async with limited_pool.connection() as successor:
            await successor.execute("SELECT * FROM positions FOR UPDATE")  # not blocked: the lock is gone
        with pytest.raises(StoreUnavailableError, match="25P03"), pg_errors("applying a batch"):
            await frozen.execute("SELECT 1")  # the frozen one, resumed: a retriable error


def _frozen_in_copy(db_url: str, app: str) -> psycopg.Connection[tuple[object, ...]]:
    """A session that locked the positions and then stopped feeding a COPY (a client frozen mid-COPY)."""
    conn = psycopg.Connection.connect(db_url, application_name=app)
    conn.execute("SELECT * FROM positions FOR UPDATE")
    conn.pgconn.send_query(b"COPY positions FROM STDIN")  # the server now waits for the client's rows
    return conn


async def _state(db_url: str, pid: int) -> tuple[str, str] | None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT state, wait_event FROM pg_stat_activity WHERE pid = %s", [pid])
        row = await cur.fetchone()
        return None if row is None else (row[0], row[1])


async def test_a_session_frozen_in_a_copy_is_ended_once_it_blocks_another(
    limited_pool: PgPool, positions_database_url: str
) -> None:
    frozen = _frozen_in_copy(positions_database_url, APP)
    pid = frozen.info.backend_pid
    try:
        await asyncio.sleep(1.5)  # past the bound: Postgres' idle-in-transaction timeout does not apply in a COPY
        assert await _state(positions_database_url, pid) == ("active", "ClientRead")
        assert await end_stalled_blockers(limited_pool, applications=[APP], stalled_s=1.0) == []  # blocks nobody

        async def successor() -> None:
            async def batch() -> None:
                async with limited_pool.connection() as conn:
                    await conn.execute("SELECT * FROM positions FOR UPDATE")

            await retrying(batch, action="applying a batch", base_delay_s=0.05)

        waiting = asyncio.create_task(successor())
        await asyncio.sleep(0.2)  # waiting for the frozen session's lock
        # A bound it has not stalled for yet: left alone; then past it, ended.
        assert await end_stalled_blockers(limited_pool, applications=[APP], stalled_s=60.0) == []
        assert await end_stalled_blockers(limited_pool, applications=["another-app"], stalled_s=1.0) == []
        began = time.monotonic()
        ended: list[int] = []
        while not ended and time.monotonic() - began < 5:  # between lock timeouts the successor is not waiting
            ended = await end_stalled_blockers(limited_pool, applications=[APP], stalled_s=1.0)
            await asyncio.sleep(0.05)
        assert ended == [pid]
        await asyncio.wait_for(waiting, 5)
        assert await _state(positions_database_url, pid) is None
    finally:
        frozen.close()


async def test_a_projecting_serve_bounds_its_sessions(pg_admin_url: str, tmp_path: Path) -> None:
    """``convlog serve`` with its projector shares one pool between the API and the projector:
    that pool gets the projector's bounds too (a frozen serve must not hold its partitions' locks)."""
    from convlog.runtime.serve import running_service  # noqa: PLC0415 - the whole service, for this test only

    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=tmp_path, partitions=2, api_tokens="acme:t", summarizer="off")
        async with running_service(settings) as service, service.pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('lock_timeout')"
                )
            ).fetchone()
    assert row == ("30s", "10s")
