"""Two databases projecting one topic — the same read-models schema name in both (one manifest,
two regions) — are two consumer groups (the summarizer's too): each database's projector owns
every partition and projects every event, instead of the two splitting them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import pytest

from convlog.resources import projector_group, summarizer_group
from convlog.runtime.summarizing import build_summarizer
from convlog.settings import Settings
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.log import EventLog
from events.producer import ConversationProducer
from pgstore.pool import database_identity
from tests.cluster.group_members import Member, start_member
from tests.projection_support import Projection, projection_database
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


async def _until(
    condition: Callable[[], Awaitable[bool]], members: list[Member], what: str, timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n" + "\n".join(m.tail() for m in members))
        await asyncio.sleep(0.1)


async def test_database_identity_is_readable_stable_and_differs_per_database(
    projection: Projection, pg_admin_url: str
) -> None:
    mine = await database_identity(projection.pool)
    name = (await projection.rows("SELECT current_database()"))[0][0]
    assert mine.startswith(f"{name}-")
    assert len(mine) == len(name) + 9
    assert await database_identity(projection.pool) == mine
    async with projection_database(pg_admin_url) as other:
        theirs = await database_identity(other.pool)
    assert theirs != mine
    group = projector_group("convlog.events", mine, "convlog_read_models_v1")
    assert group == f"convlog.projector.convlog.events.{mine}.convlog_read_models_v1"
    assert summarizer_group("convlog.events", mine) != summarizer_group("convlog.events", theirs)
    assert summarizer_group("convlog.events", mine) == f"convlog.summarizer.convlog.events.{mine}"


def test_a_kafka_summarizer_is_not_built_without_its_database(projection: Projection) -> None:
    settings = Settings(kafka_bootstrap="127.0.0.1:1", topic="convlog.events")
    with pytest.raises(ValueError, match="named for its database"):
        build_summarizer(settings, projection.pool, cast("EventLog", None))


@pytest.mark.slow
async def test_two_databases_projecting_one_topic_each_get_every_partition(
    kafka_bootstrap: str, pg_admin_url: str, projection: Projection, tmp_path: Path
) -> None:
    topic = unique_topic("twodbs")
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic=topic, partitions=2)
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=2)
    members: list[Member] = []
    async with projection_database(pg_admin_url) as other:
        assert other.version.schema == projection.version.schema  # the default name in both
        databases = {"region-a": projection, "region-b": other}
        try:
            for name, database in databases.items():
                env = {
                    **settings.subprocess_env(),
                    "CONVLOG_DATABASE_URL": database.url,
                    "CONVLOG_DATA_DIR": str(tmp_path / name),
                    "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": "6000",
                }
                members.append(start_member(name, env, tmp_path, instance_id=None))

            async def both_own_everything() -> bool:
                return all(m.owned() == {0, 1} for m in members)

            await _until(both_own_everything, members, "each database's projector to own both partitions")
            producer = ConversationProducer(log, producer="twodbs-test")
            appended = [
                await producer.append_user(ConversationKey("acme", "u", f"conv-{i}"), f"hello {i}") for i in range(20)
            ]
            assert {a.partition for a in appended} == {0, 1}
            expected = sorted((a.partition, a.offset, a.event_id) for a in appended)
            query = 'SELECT partition, "offset", event_id FROM {s}.transcript ORDER BY 1, 2'

            async def both_projected_everything() -> bool:
                return [await d.rows(query) for d in databases.values()] == [expected, expected]

            await _until(both_projected_everything, members, "both databases to project every event")
            for m in members:
                assert m.alive, m.tail()
                assert [c.assigned for c in m.changes()] == [True], m.tail()  # never revoked
        finally:
            for m in members:
                m.stop()
            await log.close()
