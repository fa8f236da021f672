"""Versioned SQL migrations of the ``convlog`` Postgres schema.

The migrations are the files ``NNNN_<name>.sql`` in ``pgstore/migrations/`` (shipped in the
wheel as package data), numbered 1, 2, 3... without gaps. :func:`migrate` applies the pending
ones in order, each file in its own transaction together with its row in
``convlog.schema_migrations`` (version, name, sha256 checksum, applied_at), so a failing file
leaves nothing behind and is retried whole by the next run. A session advisory lock serialises
migrators: processes that start together apply every version exactly once, the others wait and
find nothing to do. A migration may have a step in Python run in its transaction after the file
(``_AFTER``): 0006's back-fill needs a value only the caller's settings know. The checksum of
every applied file is compared with the file on disk, so an applied migration that was edited
afterwards is refused (write a new migration instead).

Files may use any SQL that runs inside a transaction (no ``CREATE INDEX CONCURRENTLY``,
``VACUUM`` or ``ALTER TYPE ... ADD VALUE`` before PG 12), and name objects ``convlog.<name>``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import psycopg
from psycopg import pq

from pgstore.pool import convert_pg_error, describe_url, pg_errors
from projectors.errors import MigrationError
from projectors.window import LEGACY_KEEP_TURNS, LEGACY_MAX_TURNS, WindowPolicy

__all__ = [
    "LOCK_KEY",
    "MIGRATIONS_DIR",
    "SCHEMA",
    "Migration",
    "load_migrations",
    "migrate",
    "migrate_command",
    "schema_version",
]

SCHEMA = "convlog"  # every table of convlog lives in this Postgres schema
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# pg_advisory_lock key of the migrator: the bytes of "convlog" as a big-endian bigint.
LOCK_KEY = int.from_bytes(b"convlog", "big")

_FILE_NAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9][a-z0-9_]*)\.sql$")

AnyConnection = psycopg.AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str  # "core" for 0001_core.sql
    path: Path
    sql: str
    checksum: str  # sha256 hex of the file, line endings normalised to \n

    @property
    def label(self) -> str:
        """``0001_core``."""
        return self.path.stem

    @property
    def filename(self) -> str:
        return self.path.name


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations in ``directory``, by version. Raises :class:`MigrationError` for a missing
    or empty folder, a ``.sql`` file not named ``NNNN_name.sql``, a duplicate version or a gap."""
    if not directory.is_dir():
        raise MigrationError(f"migrations folder {directory} does not exist")
    by_version: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if match is None:
            raise MigrationError(
                f"migration file {path.name} in {directory} is not named NNNN_name.sql "
                "(four digits, then lower-case letters, digits and '_')"
            )
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MigrationError(f"migration file {path.name} is not UTF-8: {e}") from e
        migration = Migration(
            version=int(match["version"]),
            name=match["name"],
            path=path,
            sql=text,
            checksum=hashlib.sha256(raw.replace(b"\r\n", b"\n")).hexdigest(),
        )
        if migration.version in by_version:
            raise MigrationError(
                f"duplicate migration version {migration.version}: "
                f"{by_version[migration.version].filename} and {path.name}"
            )
        by_version[migration.version] = migration
    if not by_version:
        raise MigrationError(f"no migration files (NNNN_name.sql) in {directory}")
    versions = sorted(by_version)
    for expected, version in enumerate(versions, start=1):
        if version != expected:
            raise MigrationError(
                f"migration {expected:04d}_*.sql is missing in {directory}: "
                f"versions must run 1, 2, 3... without gaps, found {versions}"
            )
    return [by_version[v] for v in versions]


async def migrate(
    conn_or_url: AnyConnection | str,
    *,
    target: int | None = None,
    migrations_dir: Path = MIGRATIONS_DIR,
    legacy_window: WindowPolicy | None = None,
) -> list[int]:
    """Apply the pending migrations up to ``target`` (default: the latest); return the versions
    applied by this call (empty when the schema was up to date, or already past ``target``).

    ``conn_or_url`` is a libpq URL or an idle connection (not inside a transaction; its autocommit
    setting is restored afterwards). Raises :class:`MigrationError` for an invalid migrations
    folder, an edited applied file, a database newer than these migrations or a failing file
    (named in the message; its transaction is rolled back), and
    :class:`~projectors.errors.StoreUnavailableError` if Postgres is unreachable (retriable).

    ``legacy_window``: the window policy the versions made before 0006 were projected with, which
    0006 records on them (default: the old default 8 -> 6; ``convlog`` passes
    ``Settings.legacy_window_policy()``). Unused once 0006 is applied.
    """
    applied, _ = await _migrate(conn_or_url, target=target, migrations_dir=migrations_dir, legacy_window=legacy_window)
    return [m.version for m in applied]


async def schema_version(conn_or_url: AnyConnection | str) -> int:
    """The highest applied migration version, 0 for a database never migrated."""
    async with _connection(conn_or_url) as conn:
        with pg_errors("read the schema version"):
            return await _current_version(conn)


async def migrate_command(url: str, *, out: TextIO | None = None, legacy_window: WindowPolicy | None = None) -> int:
    """``convlog migrate``: apply pending migrations, print what was done; returns the exit code."""
    out = out or sys.stdout
    began = time.monotonic()
    applied, version = await _migrate(url, target=None, migrations_dir=MIGRATIONS_DIR, legacy_window=legacy_window)
    for migration in applied:
        out.write(f"applied {migration.label}\n")
    if applied:
        out.write(f"schema is at version {version} ({time.monotonic() - began:.2f}s)\n")
    else:
        out.write(f"schema is up to date (version {version})\n")
    out.flush()
    return 0


# ---------------------------------------------------------------- internals


async def _migrate(
    conn_or_url: AnyConnection | str,
    *,
    target: int | None,
    migrations_dir: Path,
    legacy_window: WindowPolicy | None = None,
) -> tuple[list[Migration], int]:
    migrations = load_migrations(migrations_dir)  # a broken folder fails before touching the database
    latest = migrations[-1].version
    if target is not None and not 1 <= target <= latest:
        raise MigrationError(f"target version {target} does not exist (migrations run 1..{latest})")
    goal = latest if target is None else target
    async with _connection(conn_or_url) as conn, _advisory_lock(conn):
        with pg_errors("read convlog.schema_migrations"):
            await _ensure_bookkeeping(conn)
            recorded = await _recorded(conn)
        _verify(recorded, migrations, migrations_dir)
        applied: list[Migration] = []
        for migration in migrations[:goal]:
            if migration.version not in recorded:
                await _apply(conn, migration, legacy_window or WindowPolicy(LEGACY_MAX_TURNS, LEGACY_KEEP_TURNS))
                applied.append(migration)
        return applied, max([*recorded, *(m.version for m in applied)], default=0)


@asynccontextmanager
async def _connection(conn_or_url: AnyConnection | str) -> AsyncIterator[AnyConnection]:
    """An autocommit connection: a new one for a URL, else the caller's, switched to autocommit."""
    if isinstance(conn_or_url, str):
        with pg_errors(f"connect to {describe_url(conn_or_url)}"):
            conn = await psycopg.AsyncConnection.connect(
                conn_or_url, autocommit=True, application_name="convlog-migrate", connect_timeout=10
            )
        async with conn:
            yield conn
        return
    conn = conn_or_url
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise MigrationError(
            "migrate() needs an idle connection, not one inside a transaction "
            f"(status {conn.info.transaction_status.name}); commit or roll back first"
        )
    autocommit = conn.autocommit
    with pg_errors("prepare the connection for migrations"):
        await conn.set_autocommit(True)
    try:
        yield conn
    finally:
        if not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            await conn.set_autocommit(autocommit)


@asynccontextmanager
async def _advisory_lock(conn: AnyConnection) -> AsyncIterator[None]:
    """Hold the migrator's session advisory lock (waits while another migrator holds it)."""
    with pg_errors("take the migration lock"):
        await conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
    try:
        yield
    finally:
        # A broken connection has released the lock with its session already.
        if not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.OperationalError):  # the session ended, and the lock too
                await conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))


async def _ensure_bookkeeping(conn: AnyConnection) -> None:
    """Create schema ``convlog`` and ``convlog.schema_migrations`` unless they exist.

    Checked before creating, so a role without CREATE on the database can run migrations on a
    schema prepared by an administrator. Runs under the advisory lock: no race between migrators.
    """
    row = await (await conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (SCHEMA,))).fetchone()
    if row is None or not row[0]:
        await conn.execute("CREATE SCHEMA convlog")
    row = await (await conn.execute("SELECT to_regclass(%s) IS NOT NULL", ("convlog.schema_migrations",))).fetchone()
    if row is None or not row[0]:
        await conn.execute(
            """
            CREATE TABLE convlog.schema_migrations (
                version    int         PRIMARY KEY,
                name       text        NOT NULL,
                checksum   text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )


async def _recorded(conn: AnyConnection) -> dict[int, tuple[str, str]]:
    """Applied versions: version -> (name, checksum)."""
    cursor = await conn.execute("SELECT version, name, checksum FROM convlog.schema_migrations")
    return {version: (name, checksum) for version, name, checksum in await cursor.fetchall()}


async def _current_version(conn: AnyConnection) -> int:
    row = await (await conn.execute("SELECT to_regclass(%s) IS NOT NULL", ("convlog.schema_migrations",))).fetchone()
    if row is None or not row[0]:
        return 0
    row = await (await conn.execute("SELECT max(version) FROM convlog.schema_migrations")).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def _verify(recorded: dict[int, tuple[str, str]], migrations: Sequence[Migration], migrations_dir: Path) -> None:
    """Every applied version must be a file here, unchanged (same checksum, same name)."""
    known = {m.version: m for m in migrations}
    unknown = sorted(v for v in recorded if v not in known)
    if unknown:
        raise MigrationError(
            f"the database has migration version(s) {unknown} that {migrations_dir} does not have "
            f"(latest here: {migrations[-1].label}); this build is older than the database schema"
        )
    for version, (name, checksum) in sorted(recorded.items()):
        migration = known[version]
        if checksum != migration.checksum:
            raise MigrationError(
                f"migration {migration.filename} was changed after it was applied: its sha256 is "
                f"{migration.checksum[:16]}..., the database recorded {checksum[:16]}... "
                "Restore the applied file and put the change into a new migration."
            )
        if name != migration.name:
            raise MigrationError(
                f"migration version {version} was applied as {version:04d}_{name}.sql "
                f"but the file is now {migration.filename}; restore its name"
            )


async def _record_legacy_window(conn: AnyConnection, legacy_window: WindowPolicy) -> None:
    """0006: the versions made before it get the policy they were projected with. Only rows
    without one (in 0006's transaction: all of them), so running it again changes nothing."""
    await conn.execute(
        "UPDATE convlog.projection_versions SET window_max_turns = %s, window_keep_turns = %s "
        "WHERE window_max_turns IS NULL OR window_keep_turns IS NULL",
        (legacy_window.max_turns, legacy_window.keep_turns),
    )
    # From here on a version without a policy is refused (an older build making one, say).
    await conn.execute(
        "ALTER TABLE convlog.projection_versions "
        "ALTER COLUMN window_max_turns SET NOT NULL, ALTER COLUMN window_keep_turns SET NOT NULL"
    )


# Steps in Python run after a migration's file in its transaction, by (version, name): a folder
# of other migrations (tests) never matches.
_AFTER = {(6, "window_policy"): _record_legacy_window}


async def _apply(conn: AnyConnection, migration: Migration, legacy_window: WindowPolicy) -> None:
    """Run one file (and its step in Python, if any) and record it, in one transaction."""
    try:
        async with conn.transaction():
            await conn.execute(migration.sql.encode())  # no parameters: several statements allowed
            after = _AFTER.get((migration.version, migration.name))
            if after is not None:
                await after(conn, legacy_window)
            await conn.execute(
                "INSERT INTO convlog.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
    except psycopg.Error as e:
        action = f"migration {migration.filename} failed and was rolled back"
        error = convert_pg_error(e, action=action)
        if error.retriable:
            raise error from e
        raise MigrationError(str(error)) from e
