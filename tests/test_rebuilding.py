"""Rebuild helpers, and ``serve`` following a switch (embedded log, real Postgres)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from convlog.ops.rebuild_sharing import _share_for, shares
from convlog.ops.rebuilding import DEFAULT_WORKERS, RebuildOptions, building, worker_count
from convlog.runtime.serve import running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from pgstore.pool import open_pool
from pgstore.store import PostgresProjectionStore
from pgstore.versions import create_version, switch
from projectors.errors import VersionBusyError
from projectors.window import WindowPolicy
from tests.projection_support import COUNTER, Projection, project_all, temporary_database

KEY = ConversationKey("acme", "u1", "c1")


def test_shares_give_every_partition_to_exactly_one_worker_and_balance_the_work() -> None:
    todo = {0: 900, 1: 100, 2: 500, 3: 500, 4: 50, 5: 0}
    groups = shares(todo, 3)
    assert sorted(p for g in groups for p in g) == sorted(todo)
    assert sorted(sum(g.values()) for g in groups) == [550, 600, 900]
    assert shares({0: 10}, 4) == [{0: 10}]  # never more workers than partitions


def test_a_ready_worker_takes_its_part_of_what_is_left_and_nothing_below_a_batch() -> None:
    left = {0: 900, 1: 100, 2: 500, 3: 500}
    # One worker ready, none still starting: about half, this process keeps the rest.
    assert sum(left[p] for p in _share_for(left, 1, batch_size=100)) == 1000
    # Another worker still starting: a third, this process keeps its part and the other's.
    assert sum(left[p] for p in _share_for(left, 2, batch_size=100)) == 500
    assert _share_for(left, 1, batch_size=2000) == []  # less than a batch: not worth handing over
    assert _share_for({0: 5000}, 1, batch_size=100) == []  # one partition left cannot be split


def test_worker_count_is_one_per_50k_records_with_kafka_and_one_with_the_embedded_log() -> None:
    kafka = Settings(kafka_bootstrap="127.0.0.1:1")
    assert worker_count(kafka, RebuildOptions(), 10_000) == 1
    assert worker_count(kafka, RebuildOptions(), 120_000) == min(2, DEFAULT_WORKERS)
    assert worker_count(kafka, RebuildOptions(workers=3), 10) == 3
    assert worker_count(Settings(), RebuildOptions(workers=3), 10**9) == 1


@pytest.mark.postgres
async def test_serve_follows_a_switch_and_continues_the_new_version_from_its_positions(
    pg_admin_url: str, tmp_path: Path
) -> None:
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=tmp_path, partitions=4, version_poll_s=0.2)
        async with running_service(settings) as service:
            producer, log = service.deps.producer, service.event_log
            for i in range(20):
                await producer.append_user(KEY, f"question {i}")
            async with service.pool.connection() as conn:
                v2 = await create_version(conn)
            store = PostgresProjectionStore(
                service.pool,
                schema=v2.schema,
                codec=service.deps.queries.codec,  # the service's keys: its records are sealed
                counter=COUNTER,
                policy=WindowPolicy(),
                max_event_bytes=1 << 20,
                fail_fast=True,
                keys=producer.keys,
            )
            await project_all(log, store)  # the rebuild, beside the running projector
            async with service.pool.connection() as conn:
                await switch(conn, "read_models", v2.version)
            for i in range(20, 30):
                await producer.append_user(KEY, f"question {i}")
            ends = await log.end_offsets()
            deadline = time.monotonic() + 20
            while service.projector.schema != v2.schema or any(
                service.projector.positions.get(p, 0) < o for p, o in ends.items()
            ):
                assert time.monotonic() < deadline, (service.projector.schema, service.projector.positions, ends)
                await asyncio.sleep(0.05)
            async with service.pool.connection() as conn:
                # every event once: 20 from the rebuild, 10 from the projector that followed the switch
                cur = await conn.execute(f"SELECT count(*), count(DISTINCT seq) FROM {v2.schema}.transcript")  # noqa: S608
                assert await cur.fetchone() == (30, 30)


@pytest.mark.postgres
async def test_a_version_is_built_by_one_rebuild_at_a_time(projection: Projection) -> None:
    v2 = await projection.new_version()
    other = await open_pool(projection.url, max_size=2, name="another-rebuild")
    try:
        async with building(projection.pool, v2):
            with pytest.raises(VersionBusyError, match="being built by another convlog rebuild") as busy:
                async with building(other, v2):
                    pytest.fail("two rebuilds of one version")
            assert busy.value.retriable  # exit code 75: try again later
            v3 = await projection.new_version()
            async with building(other, v3):  # another version is not held up
                pass
        async with building(other, v2):  # released when the first ended
            pass
    finally:
        await other.close()
