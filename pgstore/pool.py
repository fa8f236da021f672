"""The Postgres edge: a connection pool, psycopg errors turned into convlog errors, and retries.

Everything above this module sees :class:`~projectors.errors.StoreUnavailableError` (retriable:
Postgres is down, restarting, overloaded, or broke the connection; the same operation can succeed
later), :class:`~projectors.errors.RecordRefusedError` (not retriable: Postgres refused the data
of the rows — a value, a constraint, a trigger —, so the record behind them is poison) or
:class:`~projectors.errors.ProjectionError` (not retriable: the statement or the schema is wrong).
:func:`retrying` retries only the first, with capped exponential
backoff and full jitter; with ``attempts=None`` it waits out an outage of any length.
:func:`convert_pg_error` is the one conversion; ``with pg_errors(action):`` applies it to a
block of Postgres work (keep the block to Postgres work: it converts ``ConnectionError`` too).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias, TypeVar

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from events.errors import ConfigurationError, ConvlogError
from pgstore.pool_check import IdleCheck
from pgstore.session_limits import (
    KEEPALIVES_COUNT,
    KEEPALIVES_IDLE_S,
    KEEPALIVES_INTERVAL_S,
    ConfigureSession,
    SessionLimits,
)
from projectors import retry
from projectors.errors import ProjectionError, RecordRefusedError, StoreUnavailableError

__all__ = [
    "PgPool",
    "SessionLimits",
    "convert_pg_error",
    "database_identity",
    "describe_url",
    "is_refusal_sqlstate",
    "is_retriable_sqlstate",
    "open_pool",
    "pg_errors",
    "retrying",
]

T = TypeVar("T")

PgPool: TypeAlias = psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]]

# SQLSTATEs after which the same operation can succeed on a later attempt: availability, not data.
# Classes 08 (connection exception) and 53 (insufficient resources: disk full, out of memory,
# too many connections) as prefixes, and these.
_RETRIABLE_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown: the server is stopping (fast/smart shutdown, pg_terminate_backend)
        "57P02",  # crash_shutdown: another backend crashed, the server restarts
        "57P03",  # cannot_connect_now: starting up / recovering
        "57P05",  # idle_session_timeout: the server closed an idle session
        # A session's own limits (SessionLimits): a lock held by a stalled or slower transaction,
        # or a statement slower than its bound, is worth another attempt on a fresh transaction; so
        # is a session Postgres ended for idling in a transaction (a frozen projector, resumed: the
        # positions fence then refuses its batch).
        "55P03",  # lock_not_available: lock_timeout
        "57014",  # query_canceled: statement_timeout (or pg_cancel_backend)
        "25P03",  # idle_in_transaction_session_timeout
        "25P04",  # transaction_timeout
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
    }
)  # not 57P04 database_dropped: waiting does not bring a dropped database back
_RETRIABLE_CLASSES = ("08", "53")
# SQLSTATEs that say Postgres refused the *data* of a statement: the same statement with other
# rows goes through, so one record's rows are poison, not the projector's. (Not class 42 beyond
# 42804, 25, 55, 58, XX: those fail the statement whatever the rows — a schema or a server
# problem; blaming records for them would park every conversation instead of stopping.)
_REFUSAL_CLASSES = (
    "22",  # data_exception: a value the column cannot hold — 22P05 a NUL (\u0000) in text or jsonb,
    #        22021 bad encoding, 22001 too long, 22003 out of range, 22007/22008 dates, 22P02 ...
    "23",  # integrity_constraint_violation: NOT NULL, CHECK, FOREIGN KEY, UNIQUE, EXCLUDE refused the
    #        row. No duplicate is expected to raise: the fold drops repeated event ids before
    #        writing and rows that may exist are written with ON CONFLICT, so a 23505 too is the row's.
    "2F",  # sql_routine_exception: a function (a trigger) failed on the row's values
    "P0",  # plpgsql_error: RAISE EXCEPTION (P0001) or ASSERT (P0004) of a trigger validating rows
)
_REFUSAL_SQLSTATES = frozenset(
    {
        "27000",  # triggered_data_change_violation: a trigger's change of this row is not allowed
        "42804",  # datatype_mismatch: a value (a trigger's row, a record) does not fit its type at run time
        "54000",  # program_limit_exceeded: a value too large for an index row or a field
    }
)
# Where a COPY error happened (its CONTEXT line), without the row's content that follows.
_COPY_CONTEXT = re.compile(r"COPY (\S+), line \d+(?:, column ([^:\s]+))?")
# libpq reports connection-time failures without a SQLSTATE. These few are configuration
# mistakes, not outages: retrying them forever would hide the mistake. (Server messages in
# English, i.e. the default lc_messages; other languages fall back to "retriable".)
_PERMANENT_CONNECT_FAILURES = re.compile(
    r'FATAL:\s+(database|role) ".*" does not exist'
    r"|password authentication failed|no pg_hba\.conf entry|SSL was required"
    r"|invalid (connection option|URI|integer value)|missing \"=\" after"
)
_DEFAULT_CONNECT_TIMEOUT_S = 10


def is_retriable_sqlstate(sqlstate: str) -> bool:
    """True for connection exceptions (class 08), insufficient resources (class 53),
    shutdowns and restarts, serialization failures and deadlocks."""
    return sqlstate.startswith(_RETRIABLE_CLASSES) or sqlstate in _RETRIABLE_SQLSTATES


def is_refusal_sqlstate(sqlstate: str) -> bool:
    """True when Postgres refused the data of a statement (classes 22, 23, 2F, P0 and a few
    others), so the record behind the rows is poison."""
    return sqlstate.startswith(_REFUSAL_CLASSES) or sqlstate in _REFUSAL_SQLSTATES


def _refusal_reason(e: psycopg.Error) -> str:
    """What was refused and where, without the rows' content (a CHECK violation's DETAIL
    repeats the whole row): the message, for data exceptions their detail, the table and
    column, the constraint, the SQLSTATE."""
    diag = e.diag
    text = diag.message_primary or str(e).strip().splitlines()[0]  # client-side errors have no diag
    if e.sqlstate is not None and e.sqlstate.startswith("22") and diag.message_detail:
        text += f" ({diag.message_detail.strip()})"
    table, column = diag.table_name, diag.column_name
    copied = _COPY_CONTEXT.search(diag.context or "")
    if copied is not None:
        table, column = table or copied.group(1), column or copied.group(2)
    if table:
        text += f" in {table}" + (f".{column}" if column else "")
    if diag.constraint_name:
        text += f", constraint {diag.constraint_name}"
    return f"{type(e).__name__}: {text} (SQLSTATE {e.sqlstate or 'none: refused by the driver'})"


def describe_url(url: str) -> str:
    """``user@host:port/dbname`` of a libpq URL or DSN, without the password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "<unparsable database URL>"
    user = f"{params['user']}@" if params.get("user") else ""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = f":{params['port']}" if params.get("port") else ""
    return f"{user}{host}{port}/{params.get('dbname', '')}"


def convert_pg_error(e: BaseException, *, action: str) -> ConvlogError:
    """The convlog error for a driver exception raised while doing ``action``.

    Raise the result ``from e``. Retriable (:class:`StoreUnavailableError`): connection-level
    ``OperationalError``/``InterfaceError`` (refused, closed, broken; they carry no SQLSTATE),
    pool timeouts, ``TimeoutError``/``ConnectionError`` and the SQLSTATEs of :func:`is_retriable_sqlstate`.
    A refusal of the data (:func:`is_refusal_sqlstate`, or a value the driver refuses to send,
    such as a NUL in text) is a :class:`RecordRefusedError`. Everything else is a
    :class:`ProjectionError` (not retriable) whose message carries ``action`` and the SQLSTATE.
    A :class:`ConvlogError` is returned unchanged.
    """
    if isinstance(e, ConvlogError):
        return e
    kind = type(e).__name__
    message = str(e).strip() or kind
    error: ConvlogError
    if isinstance(e, psycopg_pool.PoolClosed):
        error = ProjectionError(f"{action}: the connection pool is closed ({message})")
    elif isinstance(e, psycopg_pool.PoolTimeout | psycopg_pool.TooManyRequests):
        error = StoreUnavailableError(f"{action}: no Postgres connection available: {message}")
    elif isinstance(e, psycopg.Error):
        sqlstate = e.sqlstate
        if (sqlstate is None and isinstance(e, psycopg.DataError)) or (sqlstate and is_refusal_sqlstate(sqlstate)):
            reason = _refusal_reason(e)
            error = RecordRefusedError(f"{action}: Postgres refused the data: {reason}", reason=reason)
        elif sqlstate is not None:
            cls = StoreUnavailableError if is_retriable_sqlstate(sqlstate) else ProjectionError
            error = cls(f"{action}: {kind}: {message} (SQLSTATE {sqlstate})")
        elif isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
            if _PERMANENT_CONNECT_FAILURES.search(message):
                error = ProjectionError(f"{action}: cannot connect to Postgres: {message}")
            else:
                error = StoreUnavailableError(f"{action}: Postgres unavailable: {kind}: {message}")
        else:
            error = ProjectionError(f"{action}: {kind}: {message} (no SQLSTATE)")
    elif isinstance(e, TimeoutError | ConnectionError):
        error = StoreUnavailableError(f"{action}: Postgres unavailable: {kind}: {message}")
    else:
        error = ProjectionError(f"{action}: {kind}: {message}")
    error.__cause__ = e
    return error


@contextmanager
def pg_errors(action: str) -> Iterator[None]:
    """A block whose driver errors (and the pool's timeouts) leave converted by
    :func:`convert_pg_error`: ``with pg_errors("read the transcript of k"): ...``."""
    try:
        yield
    except (psycopg.Error, TimeoutError, ConnectionError) as e:
        raise convert_pg_error(e, action=action) from e


def _sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of the driver error behind ``error``, if any."""
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, psycopg.Error):
            return current.sqlstate
        current = current.__cause__
    return None


async def open_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    name: str = "convlog",
    timeout_s: float = 30.0,
    acquire_timeout_s: float = 5.0,
    limits: SessionLimits | None = None,
) -> PgPool:
    """An opened pool of non-autocommit connections (``application_name`` = ``name``).

    Waits up to ``timeout_s`` for ``min_size`` connections. Taking a connection fails after
    ``acquire_timeout_s`` (a retriable error): during an outage callers learn it within seconds
    and report themselves not ready, instead of hanging. Connections unused for over a second are
    checked when taken from the pool, so ones broken by a server restart are replaced instead of
    handed out (:mod:`pgstore.pool_check`: a busy pool pays no round trip for the check).
    Every connection has TCP keepalives at both ends (KEEPALIVES_*); ``limits`` bounds what its
    sessions wait for and how long they may idle in a transaction (:class:`SessionLimits`).
    Raises :class:`StoreUnavailableError` (retriable) if Postgres cannot be reached in time,
    :class:`ProjectionError` if it refuses us for good (no such database or role, bad password)
    and :class:`~events.errors.ConfigurationError` for a malformed URL.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as e:
        raise ConfigurationError(f"malformed database URL: {e}") from e
    kwargs: dict[str, Any] = {"autocommit": False, "application_name": name}
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = _DEFAULT_CONNECT_TIMEOUT_S
    if not any(k.startswith("keepalives") for k in params):
        kwargs |= {
            "keepalives": 1,
            "keepalives_idle": KEEPALIVES_IDLE_S,
            "keepalives_interval": KEEPALIVES_INTERVAL_S,
            "keepalives_count": KEEPALIVES_COUNT,
        }
    pool: PgPool = psycopg_pool.AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        name=name,
        kwargs=kwargs,
        open=False,
        timeout=acquire_timeout_s,
        check=IdleCheck(),
        configure=ConfigureSession((limits or SessionLimits()).server_settings()),
    )
    action = f"open pool {name!r} to {describe_url(url)}"
    try:
        await pool.open(wait=True, timeout=timeout_s)
    except psycopg.Error as e:
        await pool.close()
        # The pool only says it timed out; one direct attempt tells why (refused, no such database).
        reason = await _connect_failure(url, kwargs) if isinstance(e, psycopg_pool.PoolTimeout) else None
        raise convert_pg_error(reason or e, action=action) from (reason or e)
    except BaseException:
        await pool.close()
        raise
    return pool


_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


async def database_identity(pool: PgPool) -> str:
    """``<database name>-<8 hex>``: which database this is, across servers — its name, readable,
    and a hash of the server's system identifier (``pg_control_system()``, set when the cluster
    was initialised) with that name. Two deployments' databases differ in it even when they share
    a name (``convlog`` on two servers); a physical clone (a restored base backup, a promoted
    replica) keeps the system identifier, so it names itself as its original does. Where the
    identifier may not be read (a managed service restricting the function), the name alone."""
    with pg_errors("reading the database's identity"):
        async with pool.connection() as conn:
            name_row = await (await conn.execute("SELECT current_database()")).fetchone()
            assert name_row is not None
            name = str(name_row[0])
            try:
                async with conn.transaction():  # a savepoint: a refusal leaves the connection usable
                    row = await (await conn.execute("SELECT system_identifier FROM pg_control_system()")).fetchone()
            except psycopg.errors.InsufficientPrivilege:
                row = None
    readable = _UNSAFE_NAME_CHARS.sub("_", name)[:48]
    if row is None:
        return readable
    digest = hashlib.sha256(f"{row[0]}/{name}".encode()).hexdigest()[:8]
    return f"{readable}-{digest}"


async def _connect_failure(url: str, kwargs: dict[str, Any]) -> psycopg.Error | None:
    """The error one direct connection attempt gets, None if it succeeds."""
    try:
        conn = await psycopg.AsyncConnection.connect(url, **{**kwargs, "connect_timeout": 5})
    except psycopg.Error as e:
        return e
    await conn.close()
    return None


async def retrying(
    op: Callable[[], Awaitable[T]],
    *,
    action: str,
    attempts: int | None = None,
    base_delay_s: float = 0.2,
    max_delay_s: float = 5.0,
    on_retry: Callable[[int, ConvlogError, float], None] | None = None,
) -> T:
    """:func:`projectors.retry.retrying` with psycopg's errors (and the pool's timeouts) converted
    by :func:`convert_pg_error`: for Postgres work outside an adapter that converts its own."""
    return await retry.retrying(
        op,
        action=action,
        attempts=attempts,
        base_delay_s=base_delay_s,
        max_delay_s=max_delay_s,
        on_retry=on_retry,
        convert=_convert,
    )


def _convert(e: BaseException, action: str) -> ConvlogError | None:
    if isinstance(e, psycopg.Error | TimeoutError | ConnectionError):
        return convert_pg_error(e, action=action)
    return None
