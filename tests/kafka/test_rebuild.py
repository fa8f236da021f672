"""``convlog rebuild`` / ``verify`` / ``drop`` as an operator runs them: CLI subprocesses against
real Kafka and Postgres, compared by checksums with clean rebuilds."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from convlog.ops import forked
from convlog.ops.forked import CAN_FORK
from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.settings import Settings
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.versions import compare, schema_name, switch, versions
from tests.projection_support import Projection, project_all
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 6


def _env(projection: Projection, bootstrap: str, topic: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CONVLOG_KAFKA_BOOTSTRAP": bootstrap,
        "CONVLOG_DATABASE_URL": projection.url,
        "CONVLOG_TOPIC": topic,
        "CONVLOG_PARTITIONS": str(PARTITIONS),
        "CONVLOG_DATA_DIR": str(tmp_path),
        "CONVLOG_LOG_LEVEL": "warning",
        "CONVLOG_VERSION_POLL_S": "0.5",
        "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": "6000",
    }


async def _cli(env: dict[str, str], *args: str, timeout_s: float = 180) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "convlog.cli.main",
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@asynccontextmanager
async def _fresh_topic(bootstrap: str, name: str) -> AsyncIterator[tuple[str, KafkaEventLog, ConversationProducer]]:
    """A new topic, a log connection to it and a producer; the connection is closed on exit."""
    topic = unique_topic(name)
    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=PARTITIONS)
    try:
        yield topic, log, ConversationProducer(log, producer="test")
    finally:
        await log.close()


async def _write(producer: ConversationProducer, conversations: int, turns: int, *, rate_per_s: float = 0) -> int:
    """``turns`` user/assistant pairs in each conversation, from 20 concurrent writers, at most
    ``rate_per_s`` events a second when given."""
    written = 0
    started = time.monotonic()

    async def writer(w: int) -> None:
        nonlocal written
        for t in range(turns):
            for c in range(w, conversations, 20):
                key = ConversationKey("acme", f"user-{c % 7}", f"conv-{c}")
                await producer.append_user(key, f"turn {t}: 你好 question {c}")
                await producer.append_assistant(key, f"answer {t}", model="gpt-4o-mini", finish_reason="stop")
                written += 2
                if rate_per_s:
                    await asyncio.sleep(max(0.0, written / rate_per_s - (time.monotonic() - started)))

    await asyncio.gather(*(writer(w) for w in range(20)))
    return written


async def _applied(projection: Projection, version: int) -> int:
    """Sum of the version's stored positions (0 while its tables do not exist yet)."""
    try:
        rows = await projection.rows(
            "SELECT coalesce(sum(next_offset), 0) FROM {s}.positions", schema=schema_name("read_models", version)
        )
    except psycopg.errors.UndefinedTable:  # the subprocess has not created the version's tables yet
        return 0
    return int(rows[0][0])


async def _clean_rebuild_equals(projection: Projection, bootstrap: str, topic: str, schema: str) -> None:
    clean = await projection.new_version()
    reader = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=PARTITIONS)
    try:
        await project_all(reader, projection.store(schema=clean.schema, fail_fast=True), batch_size=2000)
    finally:
        await reader.close()
    async with projection.pool.connection() as conn:
        assert await compare(conn, schema, clean.schema) == []


async def test_a_worker_process_that_joins_takes_over_partitions_and_the_version_equals_a_clean_rebuild(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with _fresh_topic(kafka_bootstrap, "rebuild-share") as (topic, log, producer):
        written = await _write(producer, conversations=200, turns=40)
        await project_all(log, projection.store(), batch_size=2000)
    env = _env(projection, kafka_bootstrap, topic, tmp_path)
    # Batches of 20 keep this process busy for seconds: the worker is ready long before it is done.
    code, out, err = await _cli(env, "rebuild", "read_models", "--workers", "2", "--batch-size", "20", "--verify")
    assert code == 0, (out, err)
    assert "handed over to it" in out  # the worker built a share of the partitions...
    assert "checksums match" in out
    [(rows,)] = await projection.rows("SELECT count(*) FROM {s}.event_ids", schema=schema_name("read_models", 2))
    assert rows == written  # ...and no event was applied twice, nor skipped, across the hand-over
    await _clean_rebuild_equals(projection, kafka_bootstrap, topic, schema_name("read_models", 2))


@pytest.mark.skipif(not CAN_FORK, reason="workers are forked on Linux only")
async def test_a_forked_worker_leaves_the_connections_of_the_process_it_was_forked_from_alone(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker is forked from a process holding Kafka and Postgres connections (here: pytest's,
    and the rebuild's own): the child must neither use nor close them."""
    async with _fresh_topic(kafka_bootstrap, "rebuild-fork") as (topic, log, producer):
        written = await _write(producer, conversations=200, turns=40)
        await project_all(log, projection.store(), batch_size=2000)
        settings = Settings(
            kafka_bootstrap=kafka_bootstrap,
            database_url=projection.url,
            topic=topic,
            partitions=PARTITIONS,
            data_dir=tmp_path,
        )
        async with await psycopg.AsyncConnection.connect(projection.url) as mine:
            await mine.execute("SELECT 1")
            code = await rebuild(settings, RebuildOptions(batch_size=20, workers=2, verify=True), asyncio.Event())
            assert code == 0
            assert "handed over to it" in capsys.readouterr().out  # a forked worker took a share
            assert await (await mine.execute("SELECT 1")).fetchone() == (1,)  # still this process's
        assert sum((await log.end_offsets(range(PARTITIONS))).values()) == written
        [(rows,)] = await projection.rows("SELECT count(*) FROM {s}.event_ids", schema=schema_name("read_models", 2))
        assert rows == written
        assert await projection.rows("SELECT 1") == [(1,)]  # the fixture's pool too
        await _clean_rebuild_equals(projection, kafka_bootstrap, topic, schema_name("read_models", 2))
        assert await producer.append_user(ConversationKey("acme", "u", "after"), "still mine")


@pytest.mark.skipif(not CAN_FORK, reason="workers are forked on Linux only")
async def test_a_worker_that_cannot_be_forked_is_started_afresh(
    projection: Projection,
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")  # fork(2)'s EAGAIN

    monkeypatch.setattr(forked.os, "fork", no_fork)
    async with _fresh_topic(kafka_bootstrap, "rebuild-nofork") as (topic, log, producer):
        written = await _write(producer, conversations=200, turns=40)
        await project_all(log, projection.store(), batch_size=2000)
        settings = Settings(
            kafka_bootstrap=kafka_bootstrap,
            database_url=projection.url,
            topic=topic,
            partitions=PARTITIONS,
            data_dir=tmp_path,
        )
        code = await rebuild(settings, RebuildOptions(batch_size=20, workers=2, verify=True), asyncio.Event())
        assert code == 0
        assert "handed over to it" in capsys.readouterr().out  # the worker started afresh took a share
        [(rows,)] = await projection.rows("SELECT count(*) FROM {s}.event_ids", schema=schema_name("read_models", 2))
        assert rows == written


@pytest.mark.parametrize("workers", [1, 2])
async def test_rebuild_interrupted_with_ctrl_c_and_resumed_equals_an_uninterrupted_one(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path, workers: int
) -> None:
    async with _fresh_topic(kafka_bootstrap, "rebuild") as (topic, log, producer):
        written = await _write(producer, conversations=200, turns=40)
        await project_all(log, projection.store(), batch_size=2000)  # the live version, v1
    env = _env(projection, kafka_bootstrap, topic, tmp_path)

    # Small batches make the rebuild take long enough to be interrupted halfway.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "convlog.cli.main",
        "rebuild",
        "read_models",
        "--batch-size",
        "200",
        "--workers",
        str(workers),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while await _applied(projection, 2) < written // 4:
        assert proc.returncode is None, await proc.communicate()
        assert time.monotonic() < deadline, "the rebuild made no progress"
        await asyncio.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 130, (out, err)
    assert b"run the command again to resume" in out
    halfway = await _applied(projection, 2)
    assert written // 4 <= halfway < written, (halfway, written)
    [(rows,)] = await projection.rows("SELECT count(*) FROM {s}.event_ids", schema=schema_name("read_models", 2))
    assert rows == halfway  # what was applied is committed with its positions, nothing half-written

    code, out_text, err_text = await _cli(env, "rebuild", "read_models", "--verify", "--workers", str(workers))
    assert code == 0, (out_text, err_text)
    assert "resuming unfinished version 2" in out_text
    assert "checksums match" in out_text
    assert "ev/s" in err_text or "ev]" in err_text  # the progress bar reports a rate
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, schema_name("read_models", 2)) == []
        assert [v.status for v in await versions(conn)] == ["live", "building"]
    [(rows,)] = await projection.rows("SELECT count(*) FROM {s}.event_ids", schema=schema_name("read_models", 2))
    assert rows == written  # nothing applied twice across the interruption
    await _clean_rebuild_equals(projection, kafka_bootstrap, topic, schema_name("read_models", 2))


async def test_switch_under_live_traffic_loses_no_event(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = unique_topic("switch")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=PARTITIONS)
    env = _env(projection, kafka_bootstrap, topic, tmp_path)
    producer = ConversationProducer(log, producer="test")
    await _write(producer, conversations=100, turns=20)  # history before the live projector starts
    live_log = (tmp_path / "project.log").open("wb")
    live = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "convlog.cli.main", "project", cwd=REPO, env=env, stdout=live_log, stderr=live_log
    )
    try:
        # Live traffic for ~20 s, spanning the rebuild and the switch.
        producing = asyncio.create_task(_write(producer, conversations=100, turns=30, rate_per_s=300))
        await asyncio.sleep(3)
        code, out, err = await _cli(env, "rebuild", "read_models", "--verify", "--switch")
        assert code == 0, (out, err)
        assert "version 2 is live; version 1 is retired" in out
        switched_at = await _applied(projection, 2)
        assert not producing.done(), "the traffic must go on after the switch"
        await producing
        ends = await log.end_offsets()
        total = sum(ends.values())
        assert total > switched_at  # events arrived after the switch: only the live projector applies them
        deadline = time.monotonic() + 90
        while await _applied(projection, 2) < total:
            assert live.returncode is None, (tmp_path / "project.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"v2 stuck at {await _applied(projection, 2)} < {total}"
            await asyncio.sleep(0.2)
    finally:
        live.send_signal(signal.SIGTERM)
        await asyncio.wait_for(live.wait(), 30)
        live_log.close()
        await log.close()
    assert await _applied(projection, 1) < total  # the projector left the retired version
    v2 = schema_name("read_models", 2)
    [(applied,)] = await projection.rows("SELECT count(*) FROM {s}.event_ids", schema=v2)
    assert applied == total  # every event once in the new live version
    assert await projection.rows("SELECT count(*) FROM {s}.dead_letters", schema=v2) == [(0,)]
    async with projection.pool.connection() as conn:
        assert [(v.version, v.status) for v in await versions(conn)] == [(1, "retired"), (2, "live")]
    await _clean_rebuild_equals(projection, kafka_bootstrap, topic, v2)


async def test_a_running_projector_follows_a_switch_at_its_commit_not_at_its_next_poll(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``convlog project`` hears the switch's NOTIFY: with a 60 s version poll, the event
    appended right after the switch is in the new version within seconds (the new group's join)."""
    async with _fresh_topic(kafka_bootstrap, "follow") as (topic, log, producer):
        env = {**_env(projection, kafka_bootstrap, topic, tmp_path), "CONVLOG_VERSION_POLL_S": "60"}
        key = ConversationKey("acme", "u", "follow")
        await producer.append_user(key, "before the switch")
        with (tmp_path / "project.log").open("wb") as live_log:
            live = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "convlog.cli.main", "project", cwd=REPO, env=env, stdout=live_log, stderr=live_log
            )
            try:
                deadline = time.monotonic() + 60
                while await _applied(projection, 1) < 1:
                    assert time.monotonic() < deadline, (tmp_path / "project.log").read_text()[-3000:]
                    await asyncio.sleep(0.1)
                v2 = await projection.new_version()
                await project_all(log, projection.store(schema=v2.schema, fail_fast=True))
                async with projection.pool.connection() as conn:
                    await switch(conn, "read_models", v2.version)
                await producer.append_user(key, "after the switch")
                started = time.monotonic()
                while await _applied(projection, 2) < 2:
                    assert time.monotonic() - started < 30, (tmp_path / "project.log").read_text()[-3000:]
                    await asyncio.sleep(0.1)
            finally:
                live.send_signal(signal.SIGTERM)
                await asyncio.wait_for(live.wait(), 30)


async def test_verify_names_the_first_corrupted_conversation_and_row(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with _fresh_topic(kafka_bootstrap, "verify") as (topic, log, producer):
        await _write(producer, conversations=40, turns=5)
        await project_all(log, projection.store(), batch_size=2000)
    env = _env(projection, kafka_bootstrap, topic, tmp_path)
    code, out, err = await _cli(env, "verify", "--all")
    assert code == 0, (out, err)
    assert "checksums match" in out

    key = str(ConversationKey("acme", "user-3", "conv-10"))
    await projection.execute(
        "UPDATE {s}.transcript SET content = to_jsonb('tampered'::text) WHERE conversation_key = %s AND seq = 3", key
    )
    for scope in (["--all"], ["--sample", "1000"]):  # a sample larger than the table: every conversation
        code, out, err = await _cli(env, "verify", *scope)
        assert code == 1, (scope, out, err)
        assert f"conversation {key!r}, table transcript, row ({key},3)" in out, out
        assert "tampered" in out
    [(schemas,)] = await projection.rows("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'convlog_verify_%%'")
    assert schemas == 0  # the scratch schema is dropped


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_poison_record_stops_a_rebuild_with_its_coordinates_unless_parked(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path, workers: int
) -> None:
    key = ConversationKey("acme", "user-1", "conv-1")
    async with _fresh_topic(kafka_bootstrap, "poison") as (topic, log, producer):
        await _write(producer, conversations=30, turns=3)
        bad = await log.append(key=key.encode(), value=b"\xc3\x01garbage")
        await project_all(log, projection.store(), batch_size=2000)  # the live projector parks it
    env = _env(projection, kafka_bootstrap, topic, tmp_path)
    code, out, err = await _cli(env, "rebuild", "read_models", "--workers", str(workers))
    assert code == 2, (out, err)
    assert f"poison record at partition {bad.partition} offset {bad.offset}" in err
    assert "--park-poison" in err
    code, out, err = await _cli(env, "rebuild", "read_models", "--park-poison", "--verify", "--workers", str(workers))
    assert code == 0, (out, err)
    assert "resuming unfinished version 2" in out
    assert "checksums match" in out
    v2 = schema_name("read_models", 2)
    assert await projection.rows("SELECT conversation_key FROM {s}.parked", schema=v2) == [(str(key),)]


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_record_skipped_in_the_live_version_is_skipped_by_rebuild_and_verify(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path, workers: int
) -> None:
    key = ConversationKey("acme", "user-1", "conv-1")
    async with _fresh_topic(kafka_bootstrap, "skipped") as (topic, log, producer):
        await _write(producer, conversations=30, turns=2)
        bad = await log.append(key=key.encode(), value=b"\xc3\x01garbage")
        await producer.append_user(key, "after the garbage")  # held until the skip
        live = projection.store()
        await project_all(log, live, batch_size=2000)
        [(letter,)] = await projection.rows("SELECT id FROM {s}.dead_letters")
        await live.resolve(letter, skip_reason="broken client, ticket 42")
    env = _env(projection, kafka_bootstrap, topic, tmp_path)
    code, out, err = await _cli(env, "verify", "--all")
    assert code == 0, (out, err)  # the replay skipped it too: no false difference
    code, out, err = await _cli(env, "rebuild", "read_models", "--verify", "--workers", str(workers))
    assert code == 0, (out, err)
    assert "skipping the 1 record(s) an operator skipped in the live version" in out
    assert "checksums match" in out
    v2 = schema_name("read_models", 2)
    letters = await projection.rows('SELECT partition, "offset", status, resolution FROM {s}.dead_letters', schema=v2)
    assert letters == [(bad.partition, bad.offset, "skipped", "broken client, ticket 42")]
    assert await projection.rows("SELECT count(*) FROM {s}.parked", schema=v2) == [(0,)]
    rows = await projection.rows(
        "SELECT content FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq", str(key), schema=v2
    )
    assert rows[-1] == ("after the garbage",)


async def test_a_log_that_ends_before_the_live_positions_is_refused(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path
) -> None:
    async with _fresh_topic(kafka_bootstrap, "right") as (_, log, producer):
        await _write(producer, conversations=20, turns=2)
        await project_all(log, projection.store(), batch_size=2000)
    env = _env(projection, kafka_bootstrap, unique_topic("wrong"), tmp_path)  # an operator's typo
    code, out, err = await _cli(env, "rebuild", "read_models", "--switch")
    assert code == 2, (out, err)
    assert "not switching" in err
    assert "is CONVLOG_TOPIC the live projector's topic?" in err
    code, out, err = await _cli(env, "verify", "--all")
    assert code == 2, (out, err)
    assert "is CONVLOG_TOPIC the live projector's topic?" in err
    async with projection.pool.connection() as conn:
        assert [(v.version, v.status) for v in await versions(conn)] == [(1, "live"), (2, "building")]


async def test_drop_removes_a_retired_version_and_refuses_the_live_one(projection: Projection, tmp_path: Path) -> None:
    env: dict[str, Any] = {**os.environ, "CONVLOG_DATABASE_URL": projection.url, "CONVLOG_DATA_DIR": str(tmp_path)}
    env.pop("CONVLOG_KAFKA_BOOTSTRAP", None)
    v2 = await projection.new_version()
    async with projection.pool.connection() as conn:
        await switch(conn, "read_models", v2.version)
    code, out, err = await _cli(env, "drop", "read_models", "--version", "2")
    assert code == 2, (out, err)
    assert "version 2 of read_models is live and cannot be dropped" in err
    code, out, err = await _cli(env, "drop", "read_models", "--version", "1")
    assert code == 0, (out, err)
    assert "dropped read_models version 1" in out
    [(schemas,)] = await projection.rows(
        "SELECT count(*) FROM pg_namespace WHERE nspname = %s", projection.version.schema
    )
    assert schemas == 0
    code, out, err = await _cli(env, "drop", "read_models", "--version", "1")
    assert code == 2
    assert "has no version 1" in err
    code, out, err = await _cli(env, "drop", "nope", "--version", "1")
    assert code == 2
    assert "unknown projection 'nope'" in err
