"""Postgres stopped for 30 s under load: the projector waits (not ready), skips nothing, and
catches up when Postgres is back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from convlog.embedded.postgres_server import PostgresHandle
from devservices.cli import start_postgres
from events.codec import default_codec
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.migrate import migrate
from pgstore.pool import open_pool
from pgstore.store import PostgresProjectionStore
from pgstore.versions import create_version
from projectors.kafka_source import KafkaGroupSource
from projectors.runner import Projector
from projectors.window import WindowPolicy
from tests.projection_support import COUNTER
from tests.support import free_port, unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

OUTAGE_S = 30


@pytest.fixture
def private_postgres(tmp_path: Path, pg_admin_url: str) -> Iterator[PostgresHandle]:
    handle = start_postgres(tmp_path / "pg", port=free_port())
    yield handle
    handle.kill()


async def test_projector_waits_out_a_postgres_outage(private_postgres: PostgresHandle, kafka_bootstrap: str) -> None:
    url = private_postgres.url
    await migrate(url)
    pool = await open_pool(url, max_size=2, name="outage-test")
    async with pool.connection() as conn:
        version = await create_version(conn)
    topic = unique_topic("outage")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=3)
    producer = ConversationProducer(log, producer="outage-test")
    store = PostgresProjectionStore(
        pool,
        schema=version.schema,
        codec=default_codec(),
        counter=COUNTER,
        policy=WindowPolicy(),
        max_event_bytes=1 << 20,
    )
    source = KafkaGroupSource(
        bootstrap=kafka_bootstrap,
        topic=topic,
        group_id=f"outage-{topic}",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    projector = Projector(source, store, batch_size=200, fetch_timeout_s=0.2, retry_max_delay_s=2.0)
    stop = asyncio.Event()
    running = asyncio.create_task(projector.run(stop))
    written = 0

    async def produce(seconds: float) -> None:
        nonlocal written
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            key = ConversationKey("t", "u", f"c{written % 40}")
            await producer.append_user(key, f"message {written}")
            written += 1
            await asyncio.sleep(0.01)

    try:
        await produce(4)
        await _until(lambda: projector.ready and projector.stats.applied > 0, 30)
        private_postgres.stop()
        await produce(3)
        await _until(lambda: not projector.ready, 20)
        readiness_seen = [projector.ready]
        for _ in range(OUTAGE_S - 3):  # keep writing through the outage
            await produce(1)
            readiness_seen.append(projector.ready)
            assert not running.done(), running.exception() if running.done() else None
        assert not any(readiness_seen), "reported ready while Postgres was down"
        await asyncio.to_thread(private_postgres.start)
        ends = await log.end_offsets()
        await _until(lambda: all(projector.positions.get(p, 0) >= o for p, o in ends.items()), 90)
        assert projector.ready
        assert projector.stats.store_retries > 0
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await log.close()
    async with pool.connection() as conn, conn.cursor() as cur:
        await cur.execute(f'SELECT count(*), count(DISTINCT event_id) FROM "{version.schema}".transcript')  # noqa: S608
        assert await cur.fetchone() == (written, written)
    await pool.close()


async def _until(condition: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s}s")
        await asyncio.sleep(0.1)
