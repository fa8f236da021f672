"""A read-models version keeps the window policy it was made with (migration 0006): a changed
setting or default neither moves a version's windows mid-stream nor changes the contexts an
as-of rebuild gives; a rebuild makes a version with the settings' policy, served after the
switch. And the back-fill of versions made before 0006. Embedded log, real Postgres."""

from __future__ import annotations

import asyncio
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from structlog.testing import capture_logs

from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.event_types import SummaryRecorded
from events.keys import ConversationKey
from pgstore.migrate import migrate
from pgstore.versions import policy_served_at, versions
from projectors.window import WindowPolicy
from query_api.http import create_app
from tests.projection_support import temporary_database
from tests.support import convlog_cli

pytestmark = pytest.mark.postgres

KEY = ConversationKey("acme", "u1", "c1")
A = {"Authorization": "Bearer token-a"}
OLD, NEW = WindowPolicy(8, 6), WindowPolicy()  # the default before 12 -> 4, and today's


def _settings(url: str, data_dir: Path, **window: int) -> Settings:
    return Settings(
        database_url=url, data_dir=data_dir, partitions=2, api_tokens="acme:token-a", summarizer="off", **window
    )  # type: ignore[arg-type]


async def _ask(service: Service, questions: range) -> int:
    """Append one user message (one turn) per question, then a summary through the last: a
    context starts at its window then (without a summary, at the epoch's first message). The
    summary's offset."""
    producer = service.deps.producer
    for i in questions:
        await producer.append_user(KEY, f"question {i}", message_id=f"q{i}")
    summary = SummaryRecorded(f"s{questions[-1]}", "earlier questions", f"q{questions[-1]}", "test-model", "v1")
    return (await producer.append(KEY, summary, event_id=f"s{questions[-1]}")).offset


async def _live_and_rebuilt(service: Service, last: int) -> tuple[bytes, bytes]:
    """The context served live (after the projector read ``last``; the newest) and the one as-of
    rebuilds at ``last``."""
    transport = httpx.ASGITransport(app=create_app(service.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
        url = "/v1/users/u1/conversations/c1/context"
        params: dict[str, Any] = {"model": "gpt-4o", "budget_tokens": 100_000}
        live = await client.get(url, params=params | {"min_offset": last}, headers=A)
        rebuilt = await client.get(url, params=params | {"as_of": last}, headers=A)
    assert live.status_code == 200, live.text
    assert rebuilt.status_code == 200, rebuilt.text
    return live.content, rebuilt.content


def _questions(body: bytes) -> list[str]:
    return [m["content"] for m in json.loads(body)["messages"] if m["role"] == "user"]


async def test_a_version_keeps_its_window_after_the_default_changes_and_a_rebuild_changes_it(
    pg_admin_url: str, tmp_path: Path
) -> None:
    async with temporary_database(pg_admin_url) as url:
        # Made under 8 -> 6 (what every deployment ran before the default became 12 -> 4).
        async with running_service(_settings(url, tmp_path, window_max_turns=8, window_keep_turns=6)) as service:
            assert service.projector.version is not None
            assert service.projector.version.policy == OLD
            served_at = await _ask(service, range(10))
            served, _ = await _live_and_rebuilt(service, served_at)
        assert _questions(served) == [f"question {i}" for i in range(3, 10)]  # 8 -> 6: the 9th turn kept 6
        # Upgraded: the settings now name 12 -> 4; the live version goes on with 8 -> 6.
        with capture_logs() as logs:
            async with running_service(_settings(url, tmp_path)) as service:
                assert service.projector.version is not None
                assert service.projector.version.policy == OLD
                last = await _ask(service, range(10, 20))
                live, rebuilt = await _live_and_rebuilt(service, last)
                _, served_again = await _live_and_rebuilt(service, served_at)
        assert served_again == served  # byte for byte: what was served before the upgrade can be rebuilt
        assert live == rebuilt  # and what is served after it
        # 8 -> 6 throughout: turns 13..20 (12 -> 4 from the start would keep 10..20).
        assert _questions(live) == [f"question {i}" for i in range(12, 20)]
        differs = [e for e in logs if e["event"] == "window_policy_differs"]
        assert differs, logs
        assert (differs[0]["version_policy"], differs[0]["settings_policy"]) == ("8->6", "12->4")

        # A rebuild under the new settings makes a version with 12 -> 4; after the switch it serves.
        assert await rebuild(_settings(url, tmp_path), RebuildOptions(switch=True), asyncio.Event()) == 0
        with capture_logs() as logs:
            async with running_service(_settings(url, tmp_path)) as service:
                assert service.projector.version is not None
                assert (service.projector.version.version, service.projector.version.policy) == (2, NEW)
                last = await _ask(service, range(20, 21))
                live, rebuilt = await _live_and_rebuilt(service, last)
                async with service.pool.connection() as conn:
                    recorded = [(v.version, v.status, v.policy) for v in await versions(conn)]
        assert live == rebuilt
        assert _questions(live) == [f"question {i}" for i in range(9, 21)]  # 12 -> 4 from the first event
        assert not [e for e in logs if e["event"] == "window_policy_differs"]
        assert recorded == [(1, "retired", OLD), (2, "live", NEW)]


async def _version_before_0006(url: str) -> None:
    """A database as a build before 0006 left it: migrated to 0005, with one live version."""
    assert await migrate(url, target=5) == [1, 2, 3, 4, 5]
    ddl = (resources.files("pgstore") / "sql/read_models.sql").read_text(encoding="utf-8")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(sql.SQL(ddl).format(schema=sql.Identifier("convlog_read_models_v1")))
        await conn.execute(
            "INSERT INTO convlog.projection_versions (projection, version, schema_name, status) "
            "VALUES ('read_models', 1, 'convlog_read_models_v1', 'live')"
        )


async def _recorded(url: str, table: str = "projection_versions") -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT version, window_max_turns, window_keep_turns FROM convlog.{} ORDER BY version").format(
                sql.Identifier(table)
            )
        )
        return await cur.fetchall()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (8, 6)),  # the default they ran with, not today's
        ({"CONVLOG_WINDOW_MAX_TURNS": "10", "CONVLOG_WINDOW_KEEP_TURNS": "3"}, (10, 3)),  # what the operator set
        ({"CONVLOG_WINDOW_MAX_TURNS": "10"}, (10, 6)),  # one set: the other's default then
    ],
)
async def test_0006_records_on_older_versions_the_window_they_ran_with(
    pg_admin_url: str, env: dict[str, str], expected: tuple[int, int]
) -> None:
    async with temporary_database(pg_admin_url) as url:
        await _version_before_0006(url)
        settings = Settings.from_env(env)
        assert await migrate(url, legacy_window=settings.legacy_window_policy()) == [6, 7, 8, 9]
        assert await _recorded(url) == [(1, *expected)]
        assert await _recorded(url, "live_periods") == [(1, *expected)]  # 0007: live from the start with it
        # Once recorded it stays: other settings later change nothing (the migration is applied).
        assert await migrate(url, legacy_window=WindowPolicy(20, 2)) == []
        assert await _recorded(url) == [(1, *expected)]
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.NotNullViolation):  # a version without its window is refused
                await conn.execute(
                    "INSERT INTO convlog.projection_versions (projection, version, schema_name, status) "
                    "VALUES ('read_models', 2, 'convlog_read_models_v2', 'building')"
                )


def test_the_legacy_window_is_the_one_set_in_code_else_the_old_default() -> None:
    assert Settings().legacy_window_policy() == OLD
    assert Settings(window_max_turns=12, window_keep_turns=4).legacy_window_policy() == NEW  # set, if to today's
    assert Settings(window_keep_turns=2).legacy_window_policy() == WindowPolicy(8, 2)
    # Only the maximum set, below the old keep default: it cannot have run so; the settings' policy.
    assert Settings(window_max_turns=5).legacy_window_policy() == WindowPolicy(5, 4)


async def test_verify_replay_and_positions_use_the_live_versions_window_not_the_settings(
    pg_admin_url: str, tmp_path: Path
) -> None:
    async with temporary_database(pg_admin_url) as url:
        async with running_service(_settings(url, tmp_path, window_max_turns=8, window_keep_turns=6)) as service:
            served, _ = await _live_and_rebuilt(service, await _ask(service, range(10)))
        assert _questions(served)[0] == "question 3"
        # The commands run with today's default, 12 -> 4 (no window variable set).
        env = {
            **os.environ,
            "CONVLOG_DATABASE_URL": url,
            "CONVLOG_DATA_DIR": str(tmp_path),
            "CONVLOG_PARTITIONS": "2",
            "CONVLOG_LOG_LEVEL": "warning",
        }
        for name in ("CONVLOG_KAFKA_BOOTSTRAP", "CONVLOG_WINDOW_MAX_TURNS", "CONVLOG_WINDOW_KEEP_TURNS"):
            env.pop(name, None)
        verify = await asyncio.to_thread(convlog_cli, env, "verify", "--all")
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert "checksums match" in verify.stdout
        replay = await asyncio.to_thread(convlog_cli, env, "replay", str(KEY), "--budget-tokens", "100000")
        assert replay.returncode == 0, replay.stderr
        context = replay.stdout.split("tokens):\n", 1)[1]
        assert '"content": "question 3"' in context
        assert '"content": "question 2"' not in context  # 12 -> 4 would serve from question 0
        positions = await asyncio.to_thread(convlog_cli, env, "positions")
        assert positions.returncode == 0, positions.stderr
        assert "read_models v1 (live) window: at most 8 turns, dropping to 6" in positions.stdout
        assert "the settings name at most 12 turns, dropping to 4" in positions.stdout


async def _forget_the_switches(url: str) -> None:
    """The database as a build before 0007 left it: no record of when each version became live."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("DROP TABLE convlog.live_periods")
        await conn.execute("DELETE FROM convlog.schema_migrations WHERE version = 7")


async def test_as_of_rebuilds_each_context_with_the_window_of_the_version_that_served_it(
    pg_admin_url: str, tmp_path: Path
) -> None:
    """Served under version 1 (8 -> 6), then version 2 (12 -> 4) after a rebuild and a switch:
    as_of rebuilds either, byte for byte, with its own window — after 0007 back-fills a database
    switched before it, and after the old version is dropped."""
    async with temporary_database(pg_admin_url) as url:
        async with running_service(_settings(url, tmp_path, window_max_turns=8, window_keep_turns=6)) as service:
            early_at = await _ask(service, range(10))
            early, _ = await _live_and_rebuilt(service, early_at)
        assert _questions(early) == [f"question {i}" for i in range(3, 10)]  # 8 -> 6 (12 -> 4 would keep all)
        assert await rebuild(_settings(url, tmp_path), RebuildOptions(switch=True), asyncio.Event()) == 0
        async with running_service(_settings(url, tmp_path)) as service:
            late_at = await _ask(service, range(10, 20))
            late, late_rebuilt = await _live_and_rebuilt(service, late_at)
            _, early_rebuilt = await _live_and_rebuilt(service, early_at)
            before_switch = await _before_message(service, "q10")  # what the model saw answering q9
        assert _questions(late) == [f"question {i}" for i in range(9, 20)]  # 12 -> 4 over the whole log
        assert early_rebuilt == early  # under version 1's window, byte for byte
        assert late_rebuilt == late  # and version 2's
        assert before_switch == early

        await _forget_the_switches(url)  # switched before 0007: its back-fill knows where
        async with running_service(_settings(url, tmp_path)) as service:
            _, early_rebuilt = await _live_and_rebuilt(service, early_at)
            _, late_rebuilt = await _live_and_rebuilt(service, late_at)
        assert (early_rebuilt, late_rebuilt) == (early, late)

        drop = await asyncio.to_thread(convlog_cli, _env(url, tmp_path), "drop", "read_models", "--version", "1")
        assert drop.returncode == 0, drop.stdout + drop.stderr
        async with running_service(_settings(url, tmp_path)) as service:
            _, early_rebuilt = await _live_and_rebuilt(service, early_at)
            _, late_rebuilt = await _live_and_rebuilt(service, late_at)
        assert (early_rebuilt, late_rebuilt) == (early, late)  # its window and hand-over outlive it
        # convlog replay as well: version 1's window for the early point (12 -> 4 would start at 0).
        replay = await asyncio.to_thread(
            convlog_cli, _env(url, tmp_path), "replay", str(KEY), "--as-of", str(early_at), "--budget-tokens", "100000"
        )
        assert replay.returncode == 0, replay.stderr
        context = json.loads(replay.stdout.split("tokens):\n", 1)[1])
        assert _questions(json.dumps(context).encode()) == _questions(early)


async def _before_message(service: Service, message_id: str) -> bytes:
    transport = httpx.ASGITransport(app=create_app(service.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
        params = {"model": "gpt-4o", "budget_tokens": 100_000, "before_message": message_id}
        got = await client.get("/v1/users/u1/conversations/c1/context", params=params, headers=A)
    assert got.status_code == 200, got.text
    return got.content


def _env(url: str, data_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "CONVLOG_DATABASE_URL": url,
        "CONVLOG_DATA_DIR": str(data_dir),
        "CONVLOG_PARTITIONS": "2",
        "CONVLOG_LOG_LEVEL": "warning",
    }
    for name in ("CONVLOG_KAFKA_BOOTSTRAP", "CONVLOG_WINDOW_MAX_TURNS", "CONVLOG_WINDOW_KEEP_TURNS"):
        env.pop(name, None)
    return env


async def test_0007_records_the_versions_switched_before_it_in_the_order_they_went_live(pg_admin_url: str) -> None:
    """Version 1 was dropped; 2 and 3 were built side by side and 3 was switched to first. Each
    version that was live gets its row in the order they went live (not their numbers), with the
    one live before it as its hand-over; the first one known (3: version 1 left nothing) counts
    as live from the start; a building one has none."""
    async with temporary_database(pg_admin_url) as url:
        assert await migrate(url, target=6) == [1, 2, 3, 4, 5, 6]
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO convlog.projection_versions (projection, version, schema_name, status, created_at, "
                "switched_at, window_max_turns, window_keep_turns) VALUES "
                "('read_models', 2, 'convlog_read_models_v2', 'live', '2026-01-01', '2026-03-01', 8, 6), "
                "('read_models', 3, 'convlog_read_models_v3', 'retired', '2026-01-02', '2026-02-01', 10, 3), "
                "('read_models', 4, 'convlog_read_models_v4', 'building', '2026-04-01', NULL, 12, 4)"
            )
        assert await migrate(url, target=7) == [7]
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cur = await conn.execute(
                "SELECT version, window_max_turns, window_keep_turns, previous_schema, live_from "
                "FROM convlog.live_periods ORDER BY became_live_at"
            )
            assert await cur.fetchall() == [(3, 10, 3, None, {}), (2, 8, 6, "convlog_read_models_v3", {})]
            # The schemas are gone here: no positions to hand over, so the latest one holds everywhere.
            assert await policy_served_at(conn, 0, 0) == WindowPolicy(8, 6)


async def test_a_context_names_its_version_and_an_audit_naming_it_rebuilds_an_idle_re_read(
    pg_admin_url: str, tmp_path: Path
) -> None:
    """A conversation read again after a switch, with no event of its own since, is served by the
    new version with the new window: the log alone cannot tell that read from the first one. The
    live context says which version served it (Convlog-Read-Models-Version), and as_of with that
    read_models_version rebuilds it byte for byte; without it, as_of gives the first reading."""
    async with temporary_database(pg_admin_url) as url:
        async with running_service(_settings(url, tmp_path, window_max_turns=8, window_keep_turns=6)) as service:
            at = await _ask(service, range(10))
            first, first_version = await _served(service, {"min_offset": at})
        assert first_version == "1"
        assert await rebuild(_settings(url, tmp_path), RebuildOptions(switch=True), asyncio.Event()) == 0
        async with running_service(_settings(url, tmp_path)) as service:
            again, again_version = await _served(service, {})
            assert again_version == "2"
            assert _questions(again) != _questions(first)  # 12 -> 4 keeps every turn: another context
            assert (await _served(service, {"as_of": at}))[0] == first  # the first reading, as before
            as_v2, version = await _served(service, {"as_of": at, "read_models_version": 2})
            assert (as_v2, version) == (again, None)  # byte for byte; a rebuilt context names no version
            assert (await _served(service, {"as_of": at, "read_models_version": 1}))[0] == first
            for params, code in (
                ({"as_of": at, "read_models_version": 9}, "unknown_version"),
                ({"read_models_version": 2}, "invalid_request"),
            ):
                refused = await _get(service, params)
                assert (refused.status_code, refused.json()["error"]["code"]) == (422, code)
                assert refused.json()["error"]["field"] == "read_models_version"
        # convlog replay as well.
        for version, expected in (("2", again), ("1", first)):
            replay = await asyncio.to_thread(
                convlog_cli,
                _env(url, tmp_path),
                "replay",
                str(KEY),
                "--as-of",
                str(at),
                "--budget-tokens",
                "100000",
                "--read-models-version",
                version,
            )
            assert replay.returncode == 0, replay.stderr
            assert _questions(json.dumps(json.loads(replay.stdout.split("tokens):\n", 1)[1])).encode()) == _questions(
                expected
            )
        unknown = await asyncio.to_thread(
            convlog_cli, _env(url, tmp_path), "replay", str(KEY), "--as-of", str(at), "--read-models-version", "9"
        )
        assert unknown.returncode != 0
        assert "version 9 never served contexts" in unknown.stderr


async def _get(service: Service, params: dict[str, Any]) -> httpx.Response:
    transport = httpx.ASGITransport(app=create_app(service.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
        return await client.get(
            "/v1/users/u1/conversations/c1/context",
            params={"model": "gpt-4o", "budget_tokens": 100_000, **params},
            headers=A,
        )


async def _served(service: Service, params: dict[str, Any]) -> tuple[bytes, str | None]:
    got = await _get(service, params)
    assert got.status_code == 200, got.text
    return got.content, got.headers.get("Convlog-Read-Models-Version")
