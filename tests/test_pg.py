"""The Postgres edge: error conversion, retries, the pool, a real outage, the embedded server.

Tests marked ``postgres`` need ``CONVLOG_DATABASE_URL`` (``make services-up``) and skip without
it; each gets a database of its own, created for it and dropped afterwards. The outage and
embedded-server tests start private servers from the Postgres binaries (marked ``slow``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest
from psycopg import errors
from psycopg.conninfo import make_conninfo
from structlog.testing import capture_logs

from convlog.embedded.postgres import ensure_embedded_postgres, stop_embedded_postgres
from convlog.embedded.postgres_server import PostgresHandle, pg_bin_dir, start_postgres
from convlog.embedded.processes import ServiceError
from events.errors import ConvlogError
from pgstore.pool import PgPool, convert_pg_error, describe_url, open_pool, retrying
from projectors.errors import PositionConflictError, ProjectionError, RecordRefusedError, StoreUnavailableError
from tests.support import free_port, services_required

REPO_ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- shared helpers (test_migrate too)


def admin_url() -> str:
    url = os.environ.get("CONVLOG_DATABASE_URL")
    if not url and services_required():
        pytest.fail("CONVLOG_REQUIRE_SERVICES=1 but CONVLOG_DATABASE_URL is not set")
    if not url:
        pytest.skip("no Postgres: set CONVLOG_DATABASE_URL (make services-up) to run Postgres tests")
    return url


def require_pg_binaries() -> None:
    try:
        pg_bin_dir()
    except ServiceError as e:
        pytest.skip(f"no Postgres binaries: {e}")


@pytest.fixture
async def pool(fresh_database_url: str) -> AsyncIterator[PgPool]:
    pool = await open_pool(fresh_database_url, max_size=2, name="convlog-test")
    yield pool
    await pool.close()


# ---------------------------------------------------------------- convert_pg_error


RETRIABLE = [
    psycopg.OperationalError("connection failed: Connection refused"),
    psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
    psycopg.InterfaceError("the connection is lost"),
    errors.lookup("08006")("connection failure"),
    errors.lookup("08001")("unable to connect"),
    errors.AdminShutdown("terminating connection due to administrator command"),
    errors.CrashShutdown("crash"),
    errors.CannotConnectNow("the database system is starting up"),
    errors.TooManyConnections("sorry, too many clients already"),
    errors.DiskFull("could not extend file: No space left on device"),  # class 53: waits for space
    errors.OutOfMemory("out of memory"),
    errors.IdleSessionTimeout("terminating connection due to idle-session timeout"),
    errors.SerializationFailure("could not serialize access"),
    errors.DeadlockDetected("deadlock detected"),
    # A session's own limits (SessionLimits): another attempt, on a fresh transaction, can succeed.
    errors.LockNotAvailable("canceling statement due to lock timeout"),  # 55P03
    errors.QueryCanceled("canceling statement due to statement timeout"),  # 57014
    errors.IdleInTransactionSessionTimeout("terminating connection due to idle-in-transaction timeout"),
    errors.lookup("25P04")("terminating connection due to transaction timeout"),
    psycopg_pool.PoolTimeout("couldn't get a connection after 30.00 sec"),
    psycopg_pool.TooManyRequests("the pool has already 10 requests waiting"),
    TimeoutError("timed out"),
    ConnectionResetError("reset by peer"),
]

NOT_RETRIABLE = [
    (errors.SyntaxError('syntax error at or near "SELEC"'), "42601"),
    (errors.UndefinedTable('relation "nope" does not exist'), "42P01"),
    (errors.DatabaseDropped("database dropped"), "57P04"),
    (errors.InternalError_("could not read block"), "XX000"),
]

# Postgres refused the data: the record behind the rows is poison (RecordRefusedError).
REFUSED = [
    (errors.UntranslatableCharacter("unsupported Unicode escape sequence"), "22P05"),  # a NUL in jsonb
    (errors.StringDataRightTruncation("value too long for type character varying(5)"), "22001"),
    (errors.UniqueViolation("duplicate key value"), "23505"),
    (errors.CheckViolation("new row violates check constraint"), "23514"),
    (errors.NotNullViolation("null value in column"), "23502"),
    (errors.FunctionExecutedNoReturnStatement("control reached end of trigger procedure"), "2F005"),
    (errors.RaiseException("refused by a trigger"), "P0001"),
    (errors.DatatypeMismatch("returned row structure does not match"), "42804"),
    (errors.ProgramLimitExceeded("index row size exceeds maximum"), "54000"),  # an OperationalError
    (psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"), None),  # the driver's
]


@pytest.mark.parametrize("error", RETRIABLE, ids=lambda e: type(e).__name__)
def test_connection_level_errors_are_retriable_store_unavailable(error: BaseException) -> None:
    converted = convert_pg_error(error, action="load positions")
    assert isinstance(converted, StoreUnavailableError)
    assert converted.retriable
    assert converted.__cause__ is error
    assert str(converted).startswith("load positions: ")


@pytest.mark.parametrize(("error", "sqlstate"), NOT_RETRIABLE, ids=lambda e: str(getattr(e, "sqlstate", e)))
def test_statement_errors_are_not_retriable(error: psycopg.Error, sqlstate: str) -> None:
    converted = convert_pg_error(error, action="apply batch")
    assert type(converted) is ProjectionError
    assert not converted.retriable
    assert "apply batch" in str(converted)
    assert f"SQLSTATE {sqlstate}" in str(converted)
    assert converted.__cause__ is error


@pytest.mark.parametrize(("error", "sqlstate"), REFUSED, ids=lambda e: str(getattr(e, "sqlstate", e)))
def test_refused_data_is_a_record_refused_error(error: psycopg.Error, sqlstate: str | None) -> None:
    converted = convert_pg_error(error, action="apply batch")
    assert isinstance(converted, RecordRefusedError)
    assert not converted.retriable
    assert str(converted).startswith("apply batch: Postgres refused the data: ")
    assert f"SQLSTATE {sqlstate or 'none'}" in converted.reason
    assert converted.__cause__ is error


@pytest.mark.parametrize(
    "message",
    [
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
        'FATAL:  database "nope" does not exist',
        'connection failed: FATAL:  password authentication failed for user "convlog"',
        'connection failed: FATAL:  role "nobody" does not exist',
    ],
)
def test_connect_failures_from_misconfiguration_are_not_retriable(message: str) -> None:
    converted = convert_pg_error(psycopg.OperationalError(message), action="connect")
    assert type(converted) is ProjectionError
    assert not converted.retriable


def test_other_errors_are_projection_errors_and_convlog_errors_pass_through() -> None:
    closed = convert_pg_error(psycopg_pool.PoolClosed("the pool is closed"), action="x")
    assert type(closed) is ProjectionError
    assert not closed.retriable
    bug = convert_pg_error(KeyError("k"), action="fold")
    assert type(bug) is ProjectionError
    assert "fold" in str(bug)
    conflict = PositionConflictError("moved")
    assert convert_pg_error(conflict, action="x") is conflict


def test_describe_url_hides_the_password() -> None:
    described = describe_url("postgresql://convlog:secret@db.example:5433/convlog")
    assert described == "convlog@db.example:5433/convlog"
    assert describe_url("host=h port=1 dbname=d user=u password=p") == "u@h:1/d"


# ---------------------------------------------------------------- retrying (no server)


class Flaky:
    """Fails with ``errors`` one by one, then returns "ok"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


async def test_retrying_retries_operational_errors_then_succeeds() -> None:
    op = Flaky(psycopg.OperationalError("server closed the connection"), errors.DeadlockDetected("dl"))
    seen: list[tuple[int, ConvlogError, float]] = []
    with capture_logs() as logs:
        result = await retrying(
            op,
            action="apply batch",
            base_delay_s=0.01,
            max_delay_s=0.05,
            on_retry=lambda n, e, d: seen.append((n, e, d)),
        )
    assert result == "ok"
    assert op.calls == 3
    assert [n for n, _, _ in seen] == [1, 2]
    assert all(isinstance(e, StoreUnavailableError) for _, e, _ in seen)
    assert 0 <= seen[0][2] <= 0.01
    assert 0 <= seen[1][2] <= 0.02
    retries = [entry for entry in logs if entry["event"] == "pg.retry"]
    assert [entry["attempt"] for entry in retries] == [1, 2]
    assert retries[0]["log_level"] == "warning"
    assert retries[0]["action"] == "apply batch"
    assert retries[1]["sqlstate"] == "40P01"


async def test_retrying_backoff_is_capped_exponential_with_full_jitter() -> None:
    op = Flaky(*(psycopg.OperationalError("down") for _ in range(8)))
    delays: list[float] = []
    await retrying(op, action="x", base_delay_s=0.001, max_delay_s=0.004, on_retry=lambda n, e, d: delays.append(d))
    ceilings = [min(0.004, 0.001 * 2 ** (n - 1)) for n in range(1, 9)]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))


async def test_retrying_gives_up_after_attempts() -> None:
    op = Flaky(*(psycopg.OperationalError("down") for _ in range(10)))
    with pytest.raises(StoreUnavailableError) as info:
        await retrying(op, action="load", attempts=3, base_delay_s=0.001)
    assert op.calls == 3
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


async def test_retrying_raises_non_retriable_errors_at_once() -> None:
    calls: list[int] = []
    op = Flaky(errors.UndefinedTable('relation "t" does not exist'))
    with pytest.raises(ProjectionError) as info:
        await retrying(op, action="load", on_retry=lambda *a: calls.append(1))
    assert not info.value.retriable
    assert "SQLSTATE 42P01" in str(info.value)
    assert op.calls == 1
    assert calls == []


async def test_retrying_leaves_other_errors_alone() -> None:
    conflict = PositionConflictError("another consumer owns the partition")  # retriable, but not here
    op = Flaky(conflict)
    with pytest.raises(PositionConflictError) as info:
        await retrying(op, action="x", base_delay_s=0.001)
    assert info.value is conflict
    assert op.calls == 1
    bug = Flaky(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        await retrying(bug, action="x")
    assert bug.calls == 1
    with pytest.raises(ValueError, match="attempts"):
        await retrying(Flaky(), action="x", attempts=0)


async def test_retrying_retries_store_unavailable_raised_by_the_op() -> None:
    op = Flaky(StoreUnavailableError("pool is busy"))
    assert await retrying(op, action="x", base_delay_s=0.001) == "ok"
    assert op.calls == 2


async def test_retrying_is_cancellable_while_waiting() -> None:
    op = Flaky(*(psycopg.OperationalError("down") for _ in range(100)))
    task = asyncio.create_task(retrying(op, action="x", base_delay_s=10, max_delay_s=10))
    while op.calls == 0:
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# ---------------------------------------------------------------- pool and retrying on a real server


@pytest.mark.postgres
async def test_open_pool_gives_named_non_autocommit_connections(pool: PgPool) -> None:
    async with pool.connection() as conn:
        assert not conn.autocommit
        row = await (await conn.execute("SELECT current_setting('application_name')")).fetchone()
        assert row == ("convlog-test",)
    assert pool.get_stats()["pool_min"] == 1
    assert pool.max_size == 2


@pytest.mark.postgres
async def test_open_pool_fails_fast_and_clearly_when_postgres_is_unreachable() -> None:
    url = f"postgresql://convlog@127.0.0.1:{free_port()}/convlog"
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="refused") as info:
        await open_pool(url, timeout_s=1.0)
    assert info.value.retriable
    assert time.monotonic() - began < 10


@pytest.mark.postgres
async def test_open_pool_reports_a_missing_database_as_not_retriable(fresh_database_url: str) -> None:
    url = make_conninfo(fresh_database_url, dbname="convlog_no_such_db")
    with pytest.raises(ProjectionError, match="does not exist") as info:
        await open_pool(url, timeout_s=1.0)
    assert not info.value.retriable


@pytest.mark.postgres
async def test_retrying_gives_up_at_once_on_a_syntax_error(pool: PgPool) -> None:
    calls = 0

    async def op() -> None:
        nonlocal calls
        calls += 1
        async with pool.connection() as conn:
            await conn.execute("SELEC 1")

    with pytest.raises(ProjectionError, match="SQLSTATE 42601") as info:
        await retrying(op, action="run the bad query")
    assert not info.value.retriable
    assert type(info.value) is ProjectionError
    assert "run the bad query" in str(info.value)
    assert calls == 1


@pytest.mark.postgres
async def test_retrying_survives_a_terminated_connection(pool: PgPool) -> None:
    calls = 0

    async def op() -> int:
        nonlocal calls
        calls += 1
        async with pool.connection() as conn:
            if calls == 1:  # the server ends this session, as on a restart or failover
                await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            row = await (await conn.execute("SELECT 41 + 1")).fetchone()
            assert row is not None
            return int(row[0])

    retried: list[ConvlogError] = []
    result = await retrying(op, action="select", base_delay_s=0.01, on_retry=lambda n, e, d: retried.append(e))
    assert result == 42
    assert calls == 2
    assert len(retried) == 1
    assert isinstance(retried[0], StoreUnavailableError)


async def _backend_pid(pool: PgPool) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.postgres
async def test_a_connection_killed_while_idle_is_replaced_before_it_is_handed_out(fresh_database_url: str) -> None:
    pool = await open_pool(fresh_database_url, min_size=1, max_size=1, name="convlog-test")
    try:
        pid = await _backend_pid(pool)
        async with await psycopg.AsyncConnection.connect(fresh_database_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        await asyncio.sleep(1.2)  # idle past the fresh window: checked when taken
        assert await _backend_pid(pool) != pid  # no error: the broken one was replaced
    finally:
        await pool.close()


@pytest.mark.postgres
async def test_a_connection_just_used_is_handed_out_without_a_check_round_trip(pool: PgPool) -> None:
    async with pool.connection() as conn:
        await conn.execute("SELECT 1")
    checks = 0  # psycopg_pool's check is an empty query
    execute = psycopg.AsyncConnection.execute

    async def counted(self: psycopg.AsyncConnection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal checks
        checks += query == ""
        return await execute(self, query, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.AsyncConnection, "execute", counted)
        for _ in range(20):
            async with pool.connection() as conn:
                await conn.execute("SELECT 1")
        await asyncio.sleep(1.1)  # unused past the fresh window: checked once more
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
    assert checks == 1


# ---------------------------------------------------------------- a real outage (private server)


@pytest.fixture(scope="module")
def private_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresHandle]:
    require_pg_binaries()
    handle = start_postgres(tmp_path_factory.mktemp("outage"), port=free_port())
    yield handle
    handle.stop()


async def _select_one(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, connect_timeout=2) as conn:
        row = await (await conn.execute("SELECT 1")).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.slow
async def test_retrying_waits_out_an_outage(private_server: PostgresHandle) -> None:
    private_server.stop()
    retries: list[tuple[int, ConvlogError, float]] = []
    began = time.monotonic()
    task = asyncio.create_task(
        retrying(
            lambda: _select_one(private_server.url),
            action="select during an outage",
            base_delay_s=0.1,
            max_delay_s=0.5,
            on_retry=lambda n, e, d: retries.append((n, e, d)),
        )
    )
    await asyncio.sleep(2.0)
    assert not task.done()
    assert retries
    assert all(isinstance(e, StoreUnavailableError) for _, e, _ in retries)
    await asyncio.to_thread(private_server.start)
    assert await asyncio.wait_for(task, timeout=60) == 1
    print(f"outage (direct connections): back {time.monotonic() - began:.1f}s, {len(retries)} retries")


@pytest.mark.slow
async def test_retrying_waits_out_an_outage_through_the_pool(private_server: PostgresHandle) -> None:
    private_server.start()
    pool = await open_pool(private_server.url, min_size=2, max_size=2, name="outage-test")
    try:

        async def op() -> int:
            async with pool.connection(timeout=1.0) as conn:
                row = await (await conn.execute("SELECT 1")).fetchone()
                assert row is not None
                return int(row[0])

        assert await op() == 1
        private_server.stop()
        retries: list[int] = []
        began = time.monotonic()
        task = asyncio.create_task(
            retrying(op, action="pool op", max_delay_s=0.5, on_retry=lambda n, e, d: retries.append(n))
        )
        await asyncio.sleep(2.0)
        assert not task.done()
        await asyncio.to_thread(private_server.start)
        restarted = time.monotonic()
        assert await asyncio.wait_for(task, timeout=60) == 1
        print(
            f"outage (pool): back {time.monotonic() - began:.1f}s, "
            f"{time.monotonic() - restarted:.1f}s after the restart, {len(retries)} retries"
        )
    finally:
        await pool.close()


# ---------------------------------------------------------------- the embedded server


@pytest.mark.slow
def test_embedded_postgres_is_reused_and_outlives_its_starter(tmp_path: Path) -> None:
    require_pg_binaries()
    data_dir = tmp_path / "data"
    began = time.monotonic()
    # Started by a process that exits at once (as `make demo` does) ...
    starter = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from convlog.embedded.postgres import ensure_embedded_postgres as e; "
            "print(e(pathlib.Path(sys.argv[1])))",
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        cwd=REPO_ROOT,
    )
    assert starter.returncode == 0, starter.stderr
    first_start = time.monotonic() - began
    url = starter.stdout.strip().splitlines()[-1]
    handle = PostgresHandle(data_dir / "postgres")
    try:
        pid = handle.pid
        assert pid is not None, "the server died with the process that started it"
        # ... and reused by later calls, here and in other processes.
        began = time.monotonic()
        assert ensure_embedded_postgres(data_dir) == url
        assert ensure_embedded_postgres(data_dir) == url
        reuse = (time.monotonic() - began) / 2
        assert handle.pid == pid
        port = int((data_dir / "postgres" / "port").read_text())
        assert f":{port}/" in url
        with psycopg.connect(url, connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # Stopped, it comes back on the remembered port with its data.
        stop_embedded_postgres(data_dir)
        assert not handle.running
        assert ensure_embedded_postgres(data_dir) == url
        print(f"embedded postgres: first start {first_start:.1f}s, reuse {reuse * 1000:.0f}ms")
    finally:
        stop_embedded_postgres(data_dir)
    assert not handle.running
    stop_embedded_postgres(data_dir)  # idempotent
    stop_embedded_postgres(tmp_path / "never-started")
