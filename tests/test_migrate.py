"""Schema migrations: the folder's rules, and applying on real Postgres (a fresh database per test)."""

from __future__ import annotations

import asyncio
import io
import re
from importlib import resources
from pathlib import Path

import psycopg
import pytest
from psycopg import errors, sql

from pgstore.migrate import (
    LOCK_KEY,
    MIGRATIONS_DIR,
    load_migrations,
    migrate,
    migrate_command,
    schema_version,
)
from pgstore.versions import compare, create_version
from projectors.errors import MigrationError, StoreUnavailableError
from tests.support import free_port


async def _rows(url: str, query: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        return await (await conn.execute(query)).fetchall()


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


THREE = {
    "0001_one.sql": "CREATE SCHEMA IF NOT EXISTS convlog; CREATE TABLE convlog.t1 (id int);",
    "0002_two.sql": "SELECT pg_sleep(0.2);\nCREATE TABLE convlog.t2 (id int);\n",
    "0003_three.sql": "CREATE TABLE convlog.t3 (id int);",
}


# ---------------------------------------------------------------- the folder (no server)


def test_the_shipped_migrations_are_valid_and_start_with_core() -> None:
    migrations = load_migrations()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert migrations[0].label == "0001_core"
    assert migrations[0].name == "core"
    assert all(re.fullmatch(r"[0-9a-f]{64}", m.checksum) for m in migrations)
    assert MIGRATIONS_DIR.is_dir()
    assert MIGRATIONS_DIR.parent.name == "pgstore"
    assert not (MIGRATIONS_DIR / "__init__.py").exists()


def test_checksums_ignore_crlf_line_endings(tmp_path: Path) -> None:
    unix = load_migrations(_write(tmp_path / "lf", {"0001_a.sql": "SELECT 1;\nSELECT 2;\n"}))
    dos = load_migrations(_write(tmp_path / "crlf", {"0001_a.sql": "SELECT 1;\r\nSELECT 2;\r\n"}))
    assert unix[0].checksum == dos[0].checksum


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"0001_a.sql": "", "0003_c.sql": ""}, r"0002_\*\.sql is missing"),
        ({"0002_b.sql": ""}, r"0001_\*\.sql is missing"),
        ({"0001_a.sql": "", "0001_b.sql": ""}, "duplicate migration version 1: 0001_a.sql and 0001_b.sql"),
        ({"0001_a.sql": "", "2_b.sql": ""}, "2_b.sql .*not named NNNN_name.sql"),
        ({"0001_a.sql": "", "0002_Bad-Name.sql": ""}, "0002_Bad-Name.sql .*not named"),
        ({"README.md": "no sql here"}, "no migration files"),
    ],
)
def test_a_broken_folder_is_refused(tmp_path: Path, files: dict[str, str], message: str) -> None:
    with pytest.raises(MigrationError, match=message):
        load_migrations(_write(tmp_path / "m", files))


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="does not exist"):
        load_migrations(tmp_path / "nope")


async def test_a_broken_folder_fails_before_connecting(tmp_path: Path) -> None:
    folder = _write(tmp_path / "m", {"0002_b.sql": ""})
    unreachable = f"postgresql://convlog@127.0.0.1:{free_port()}/convlog"
    with pytest.raises(MigrationError, match="missing"):
        await migrate(unreachable, migrations_dir=folder)


async def test_an_unreachable_server_is_a_retriable_error() -> None:
    with pytest.raises(StoreUnavailableError) as info:
        await migrate(f"postgresql://convlog@127.0.0.1:{free_port()}/convlog")
    assert info.value.retriable


# ---------------------------------------------------------------- applying (real Postgres)

pg = pytest.mark.postgres


@pg
async def test_migrate_creates_the_core_schema_and_a_second_run_is_a_no_op(fresh_database_url: str) -> None:
    latest = load_migrations()[-1].version
    assert await schema_version(fresh_database_url) == 0
    assert await migrate(fresh_database_url) == list(range(1, latest + 1))
    recorded = await _rows(
        fresh_database_url, "SELECT version, name, checksum, applied_at FROM convlog.schema_migrations"
    )
    assert recorded[0][:3] == (1, "core", load_migrations()[0].checksum)
    assert await migrate(fresh_database_url) == []
    assert await _rows(
        fresh_database_url, "SELECT version, name, checksum, applied_at FROM convlog.schema_migrations"
    ) == (recorded)
    assert await schema_version(fresh_database_url) == latest


@pg
async def test_projection_versions_allows_one_live_version_per_projection(fresh_database_url: str) -> None:
    await migrate(fresh_database_url)
    async with await psycopg.AsyncConnection.connect(fresh_database_url, autocommit=True) as conn:
        # Every version records its window policy (0006): these rows take the default one.
        insert = (
            "INSERT INTO convlog.projection_versions "
            "(projection, version, schema_name, status, window_max_turns, window_keep_turns) SELECT *, 12, 4 FROM "
        )
        await conn.execute(insert + "(VALUES ('contexts', 1, 'contexts_v1', 'live')) AS v")
        await conn.execute(insert + "(VALUES ('contexts', 2, 'contexts_v2', 'building')) AS v")
        await conn.execute(insert + "(VALUES ('search', 1, 'search_v1', 'live')) AS v")
        with pytest.raises(errors.UniqueViolation, match="projection_versions_one_live"):
            await conn.execute("UPDATE convlog.projection_versions SET status = 'live' WHERE version = 2")
        # the switch: retire the old live version, promote the new one, in one transaction
        async with conn.transaction():
            await conn.execute(
                "UPDATE convlog.projection_versions SET status = 'retired', switched_at = now() "
                "WHERE projection = 'contexts' AND version = 1"
            )
            await conn.execute(
                "UPDATE convlog.projection_versions SET status = 'live', switched_at = now() "
                "WHERE projection = 'contexts' AND version = 2"
            )
        await conn.execute(insert + "(VALUES ('contexts', 3, 'contexts_v3', 'retired')) AS v")
        with pytest.raises(errors.CheckViolation):
            await conn.execute(insert + "(VALUES ('contexts', 4, 'contexts_v4', 'paused')) AS v")
        with pytest.raises(errors.UniqueViolation):  # schema names are unique across projections
            await conn.execute(insert + "(VALUES ('search', 2, 'contexts_v1', 'building')) AS v")
        with pytest.raises(errors.UniqueViolation):  # (projection, version) is the key
            await conn.execute(insert + "(VALUES ('search', 1, 'search_v1b', 'building')) AS v")
        with pytest.raises(errors.NotNullViolation):
            await conn.execute(insert + "(VALUES ('search', 3, NULL, 'building')) AS v")
        row = await (
            await conn.execute("SELECT created_at IS NOT NULL FROM convlog.projection_versions LIMIT 1")
        ).fetchone()
        assert row == (True,)


@pg
async def test_concurrent_migrators_apply_each_version_once(fresh_database_url: str) -> None:
    latest = load_migrations()[-1].version
    results = await asyncio.gather(*(migrate(fresh_database_url) for _ in range(6)))
    assert sorted(v for applied in results for v in applied) == list(range(1, latest + 1))
    assert sum(1 for applied in results if applied) == 1  # one migrator did it all, the rest waited
    count = await _rows(fresh_database_url, "SELECT count(*) FROM convlog.schema_migrations")
    assert count == [(latest,)]


@pg
async def test_concurrent_migrators_with_slow_files(fresh_database_url: str, tmp_path: Path) -> None:
    folder = _write(tmp_path / "m", THREE)
    first = await migrate(fresh_database_url, migrations_dir=folder, target=1)
    assert first == [1]
    results = await asyncio.gather(*(migrate(fresh_database_url, migrations_dir=folder) for _ in range(4)))
    assert sorted(v for applied in results for v in applied) == [2, 3]
    rows = await _rows(fresh_database_url, "SELECT version FROM convlog.schema_migrations ORDER BY version")
    assert rows == [(1,), (2,), (3,)]


@pg
async def test_migrators_wait_for_the_lock_holder(fresh_database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database_url, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        task = asyncio.create_task(migrate(fresh_database_url))
        await asyncio.sleep(0.5)
        assert not task.done()
        assert await schema_version(fresh_database_url) == 0
        await holder.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
        assert await asyncio.wait_for(task, timeout=10) == [m.version for m in load_migrations()]


@pg
async def test_a_tampered_checksum_is_refused(fresh_database_url: str) -> None:
    await migrate(fresh_database_url)
    async with await psycopg.AsyncConnection.connect(fresh_database_url, autocommit=True) as conn:
        await conn.execute("UPDATE convlog.schema_migrations SET checksum = repeat('0', 64) WHERE version = 1")
    with pytest.raises(MigrationError, match=r"0001_core\.sql was changed after it was applied"):
        await migrate(fresh_database_url)


@pg
async def test_an_applied_file_edited_later_is_refused_and_nothing_new_is_applied(
    fresh_database_url: str, tmp_path: Path
) -> None:
    folder = _write(tmp_path / "m", {k: v for k, v in THREE.items() if k != "0003_three.sql"})
    assert await migrate(fresh_database_url, migrations_dir=folder) == [1, 2]
    (folder / "0002_two.sql").write_text(THREE["0002_two.sql"] + "CREATE TABLE convlog.extra (id int);\n")
    _write(folder, {"0003_three.sql": THREE["0003_three.sql"]})
    with pytest.raises(MigrationError, match=r"0002_two\.sql was changed"):
        await migrate(fresh_database_url, migrations_dir=folder)
    assert await schema_version(fresh_database_url) == 2
    (folder / "0002_two.sql").rename(folder / "0002_renamed.sql")
    (folder / "0002_renamed.sql").write_text(THREE["0002_two.sql"])
    with pytest.raises(MigrationError, match=r"applied as 0002_two\.sql but the file is now 0002_renamed\.sql"):
        await migrate(fresh_database_url, migrations_dir=folder)


@pg
async def test_a_failing_migration_is_rolled_back_and_named(fresh_database_url: str, tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "m",
        {
            "0001_one.sql": THREE["0001_one.sql"],
            "0002_bad.sql": "CREATE TABLE convlog.half (id int);\nCREATE TABLE convlog.oops (id nosuchtype);\n",
        },
    )
    with pytest.raises(
        MigrationError, match=r"(?s)^migration 0002_bad\.sql failed and was rolled back: .*nosuchtype.*SQLSTATE 42704"
    ):
        await migrate(fresh_database_url, migrations_dir=folder)
    assert await schema_version(fresh_database_url) == 1  # 0001 stays applied
    tables = await _rows(
        fresh_database_url, "SELECT to_regclass('convlog.t1') IS NOT NULL, to_regclass('convlog.half')"
    )
    assert tables == [(True, None)]
    (folder / "0002_bad.sql").write_text("CREATE TABLE convlog.half (id int);\n")  # fixed before it applied
    assert await migrate(fresh_database_url, migrations_dir=folder) == [2]


@pg
async def test_target_applies_up_to_a_version(fresh_database_url: str, tmp_path: Path) -> None:
    folder = _write(tmp_path / "m", THREE)
    assert await migrate(fresh_database_url, migrations_dir=folder, target=2) == [1, 2]
    assert await migrate(fresh_database_url, migrations_dir=folder, target=1) == []  # already past it
    assert await migrate(fresh_database_url, migrations_dir=folder) == [3]
    for bad in (0, 4):
        with pytest.raises(MigrationError, match=f"target version {bad} does not exist"):
            await migrate(fresh_database_url, migrations_dir=folder, target=bad)


@pg
async def test_a_database_newer_than_the_migrations_is_refused(fresh_database_url: str, tmp_path: Path) -> None:
    folder = _write(tmp_path / "m", THREE)
    await migrate(fresh_database_url, migrations_dir=folder)
    older = _write(tmp_path / "older", {k: v for k, v in THREE.items() if k != "0003_three.sql"})
    with pytest.raises(MigrationError, match=r"version\(s\) \[3\].*older than the database schema"):
        await migrate(fresh_database_url, migrations_dir=older)


@pg
async def test_migrate_on_a_callers_connection(fresh_database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database_url) as conn:
        assert not conn.autocommit
        assert await migrate(conn) == [m.version for m in load_migrations()]
        assert not conn.autocommit  # restored
        assert await schema_version(conn) == load_migrations()[-1].version
        await conn.execute("SELECT 1")  # now inside a transaction
        with pytest.raises(MigrationError, match="idle connection"):
            await migrate(conn)
        await conn.rollback()
        assert await migrate(conn) == []
        locks = await (await conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")).fetchone()
        assert locks == (0,)  # released


@pg
async def test_migrate_command_prints_what_it_did(fresh_database_url: str) -> None:
    out = io.StringIO()
    assert await migrate_command(fresh_database_url, out=out) == 0
    assert out.getvalue().splitlines()[0] == "applied 0001_core"
    out = io.StringIO()
    assert await migrate_command(fresh_database_url, out=out) == 0
    latest = load_migrations()[-1].version
    assert out.getvalue() == f"schema is up to date (version {latest})\n"


@pg
async def test_migrate_command_writes_to_stdout(fresh_database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    await migrate_command(fresh_database_url)
    assert "applied 0001_core" in capsys.readouterr().out


_V4_COLUMN = re.compile(r"^\s+(blocks|provider|api|is_error)\s.*\n", re.MULTILINE)
_V9_COLUMN = re.compile(r"^\s+(sealed|key_id)\s.*\n", re.MULTILINE)  # 0009's, last: made after 0004's


def _transcript_before_0004(ddl: str) -> str:
    """read_models.sql with its transcript as before 0004: without the v4 columns, nor 0009's."""
    head, create, rest = ddl.partition("CREATE TABLE {schema}.transcript (")
    table, end, tail = rest.partition("\n);")
    return head + create + _V9_COLUMN.sub("", _V4_COLUMN.sub("", table)) + end + tail


async def _columns(conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str) -> list[tuple[object, ...]]:
    cur = await conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'transcript' ORDER BY ordinal_position",
        [schema],
    )
    return await cur.fetchall()


@pg
async def test_0004_gives_versions_made_before_it_the_transcript_columns_a_new_version_has(
    fresh_database_url: str,
) -> None:
    """A version made before 0004 (read_models.sql without the schema v4 columns) gets them, in
    the order a version made from today's read_models.sql has them, so their rows compare alike."""
    assert await migrate(fresh_database_url, target=3) == [1, 2, 3]
    ddl = (resources.files("pgstore") / "sql/read_models.sql").read_text(encoding="utf-8")
    old_ddl = _transcript_before_0004(ddl)
    assert old_ddl.count("\n") == ddl.count("\n") - 6
    async with await psycopg.AsyncConnection.connect(fresh_database_url, autocommit=True) as conn:
        await conn.execute(sql.SQL(old_ddl).format(schema=sql.Identifier("convlog_read_models_v1")))
        await conn.execute(
            "INSERT INTO convlog.projection_versions (projection, version, schema_name, status) "
            "VALUES ('read_models', 1, 'convlog_read_models_v1', 'live')"
        )
        before = await _columns(conn, "convlog_read_models_v1")
        assert "blocks" not in [name for name, _ in before]
        assert await migrate(fresh_database_url, target=4) == [4]
        await migrate(fresh_database_url)  # a version made today records its window policy (0006)
        new = await create_version(conn)
        assert await _columns(conn, "convlog_read_models_v1") == await _columns(conn, new.schema)
        assert (await _columns(conn, new.schema))[-6:] == [
            ("blocks", "json"),
            ("provider", "text"),
            ("api", "text"),
            ("is_error", "boolean"),
            ("sealed", "bytea"),
            ("key_id", "text"),
        ]
        assert await compare(conn, "convlog_read_models_v1", new.schema) == []


_COUNT_COLUMN = re.compile(r"^(\s+(?:reasoning_)?tokens_(?:o200k|cl100k)\s+integer)(,)", re.MULTILINE)


@pg
async def test_0005_lets_versions_made_before_it_leave_counts_of_an_uncounted_encoding_null(
    fresh_database_url: str,
) -> None:
    """A version made before 0005 (NOT NULL token counts) takes the NULL counts of an encoding
    CONVLOG_TOKEN_ENCODINGS leaves out, keeps the counts it has, and reads like a new version."""
    assert await migrate(fresh_database_url, target=4) == [1, 2, 3, 4]
    ddl = (resources.files("pgstore") / "sql/read_models.sql").read_text(encoding="utf-8")
    old_ddl, replaced = _COUNT_COLUMN.subn(r"\1 NOT NULL\2", ddl)
    assert replaced == 4
    async with await psycopg.AsyncConnection.connect(fresh_database_url, autocommit=True) as conn:
        await conn.execute(sql.SQL(old_ddl).format(schema=sql.Identifier("convlog_read_models_v1")))
        await conn.execute(
            "INSERT INTO convlog.projection_versions (projection, version, schema_name, status) "
            "VALUES ('read_models', 1, 'convlog_read_models_v1', 'live')"
        )
        row = ("k", 0, 0, 0, "e", "m", "user", "{}", 0, 0, 0, 7, 9, 0, 0)
        insert = (
            'INSERT INTO convlog_read_models_v1.transcript (conversation_key, seq, partition, "offset", event_id, '
            "message_id, role, metadata, occurred_at, epoch, turn, tokens_o200k, tokens_cl100k, "
            "reasoning_tokens_o200k, reasoning_tokens_cl100k, image_count) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s), %s, %s, %s, %s, %s, %s, 0)"
        )
        await conn.execute(insert, row)
        with pytest.raises(psycopg.errors.NotNullViolation):
            await conn.execute(insert, (*row[:1], 1, *row[2:12], None, 0, None))
        assert await migrate(fresh_database_url, target=5) == [5]
        await conn.execute(insert, (*row[:1], 1, *row[2:12], None, 0, None))
        cur = await conn.execute(
            "SELECT seq, tokens_o200k, tokens_cl100k, reasoning_tokens_cl100k FROM convlog_read_models_v1.transcript "
            "ORDER BY seq"
        )
        assert await cur.fetchall() == [(0, 7, 9, 0), (1, 7, None, None)]  # the stored counts stay
        await migrate(fresh_database_url)  # a version made today records its window policy (0006)
        new = await create_version(conn)
        nullable = (
            "SELECT column_name, is_nullable FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'transcript' AND column_name LIKE %s ORDER BY column_name"
        )
        old_columns = await (await conn.execute(nullable, ["convlog_read_models_v1", "%tokens_%"])).fetchall()
        new_columns = await (await conn.execute(nullable, [new.schema, "%tokens_%"])).fetchall()
        assert old_columns == new_columns
        assert [n for _, n in new_columns] == ["YES"] * 4
