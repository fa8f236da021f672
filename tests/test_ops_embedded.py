"""The operators' read commands beside a running `convlog serve` on the embedded log: they open
the log file read-only instead of failing on the writer's lock."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from psycopg import sql

from convlog.runtime.serve import running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from tests.projection_support import temporary_database
from tests.support import convlog_cli

pytestmark = pytest.mark.postgres

KEY = ConversationKey("acme", "u1", "beside-serve")


async def test_events_replay_positions_and_verify_run_beside_serve_but_retention_does_not(
    pg_admin_url: str, tmp_path: Path
) -> None:
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=tmp_path, partitions=4, summarizer="off")
        async with running_service(settings) as service:
            producer = service.deps.producer
            await producer.append_user(KEY, "hello from beside serve")
            answer = await producer.append_assistant(KEY, "hi there", finish_reason="stop")
            deadline = time.monotonic() + 20
            while service.projector.positions.get(answer.partition, 0) <= answer.offset:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            env = {
                **os.environ,
                "CONVLOG_DATABASE_URL": url,
                "CONVLOG_DATA_DIR": str(tmp_path),
                "CONVLOG_PARTITIONS": "4",
                "CONVLOG_LOG_LEVEL": "warning",
            }
            env.pop("CONVLOG_KAFKA_BOOTSTRAP", None)

            events = await asyncio.to_thread(convlog_cli, env, "events", str(KEY))
            assert events.returncode == 0, events.stderr
            assert "hello from beside serve" in events.stdout
            assert "hi there" in events.stdout
            replay = await asyncio.to_thread(convlog_cli, env, "replay", str(KEY))
            assert replay.returncode == 0, replay.stderr
            assert '"content": "hello from beside serve"' in replay.stdout
            # As the API's as_of (and min_offset): an offset the log does not hold is refused, not
            # answered with the last context; so is a reserve that leaves the budget nothing.
            beyond = await asyncio.to_thread(convlog_cli, env, "replay", str(KEY), "--as-of", "9999")
            assert (beyond.returncode, beyond.stdout) == (2, ""), beyond.stdout
            assert "holds no offset 9999" in beyond.stderr
            no_room = await asyncio.to_thread(
                convlog_cli, env, "replay", str(KEY), "--budget-tokens", "100", "--reserve-tokens", "200"
            )
            assert no_room.returncode == 2
            assert "leave none of budget_tokens (100)" in no_room.stderr
            positions = await asyncio.to_thread(convlog_cli, env, "positions")
            assert positions.returncode == 0, positions.stderr
            assert "total lag 0" in positions.stdout
            verify = await asyncio.to_thread(convlog_cli, env, "verify", "--all")
            assert verify.returncode == 0, verify.stdout + verify.stderr
            assert "checksums match" in verify.stdout
            async with service.pool.connection() as conn:  # an audit read's coordinates lost
                await conn.execute(
                    sql.SQL('DELETE FROM {}.event_index WHERE "offset" = %s').format(
                        sql.Identifier(service.projector.schema or "")
                    ),
                    [answer.offset],
                )
            verify = await asyncio.to_thread(convlog_cli, env, "verify", "--all")
            assert verify.returncode == 1, verify.stdout + verify.stderr
            assert f"conversation {str(KEY)!r}, table event_index" in verify.stdout
            # Retention appends erase events: it needs the writer, which serve is.
            retention = await asyncio.to_thread(convlog_cli, env, "retention", "--idle-days", "30", "--dry-run")
            assert retention.returncode != 0
            assert "open in another process" in retention.stderr


async def test_after_an_encoding_is_dropped_from_the_counted_ones_verify_and_replay_agree_with_the_old_rows(
    pg_admin_url: str, tmp_path: Path
) -> None:
    """Rows projected while CONVLOG_TOKEN_ENCODINGS named cl100k_base keep their counts; once it
    names o200k_base only (the default), verify's replay stores none, and compares what it
    counts — so the old rows still verify — and ``replay --model gpt-4`` counts when it reads,
    serving the context the stored counts give."""
    key = ConversationKey("acme", "u1", "upgraded")
    async with temporary_database(pg_admin_url) as url:
        both = Settings(
            database_url=url,
            data_dir=tmp_path,
            partitions=4,
            summarizer="off",
            token_encodings="o200k_base,cl100k_base",  # noqa: S106 - encoding names, not a password
        )
        async with running_service(both) as service:
            producer = service.deps.producer
            await producer.append_user(key, "提交之后审批流程是怎样的？")
            await producer.append_assistant(key, "先由驻场负责人确认。", finish_reason="stop")
            last = await producer.append_user(key, "ok")
            deadline = time.monotonic() + 20
            while service.projector.positions.get(last.partition, 0) <= last.offset:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            schema = (await service.deps.queries.reads()).schema
            async with service.pool.connection() as conn:
                query = sql.SQL("SELECT count(*) FROM {}.transcript WHERE tokens_cl100k IS NOT NULL")
                [(counted_rows,)] = await (await conn.execute(query.format(sql.Identifier(schema)))).fetchall()
            assert counted_rows == 3
            env = {
                **os.environ,
                "CONVLOG_DATABASE_URL": url,
                "CONVLOG_DATA_DIR": str(tmp_path),
                "CONVLOG_PARTITIONS": "4",
                "CONVLOG_LOG_LEVEL": "warning",
            }
            env.pop("CONVLOG_KAFKA_BOOTSTRAP", None)
            env.pop("CONVLOG_TOKEN_ENCODINGS", None)  # the default: o200k_base
            verify = await asyncio.to_thread(convlog_cli, env, "verify", "--all")
            assert verify.returncode == 0, verify.stdout + verify.stderr
            assert "checksums match" in verify.stdout
            replays = {}
            for counted in ("o200k_base", "o200k_base,cl100k_base"):
                replay = await asyncio.to_thread(
                    convlog_cli,
                    {**env, "CONVLOG_TOKEN_ENCODINGS": counted},
                    "replay",
                    str(key),
                    "--model",
                    "gpt-4",
                    "--budget-tokens",
                    "20",
                )
                assert replay.returncode == 0, replay.stderr
                replays[counted] = replay.stdout
    assert '"counted_at_read": true' in replays["o200k_base"]
    assert replays["o200k_base"].replace('  "counted_at_read": true,\n', "") == replays["o200k_base,cl100k_base"]
    assert '"dropped_turns": 1' in replays["o200k_base"]  # a budget that trims: the same trimming
