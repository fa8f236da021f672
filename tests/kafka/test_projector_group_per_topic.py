"""Two deployments on one Kafka cluster — each its own topic and database, both with the default
read-models schema and the same projector instance id (one manifest, two environments) — run
projector groups of their own: starting the second neither rebalances nor fences the first."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from convlog.settings import Settings
from events.kafka_log import KafkaEventLog
from tests.cluster.group_members import Member, start_member
from tests.projection_support import Projection, projection_database
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


async def _assigned(member: Member, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not member.owned():
        if time.monotonic() > deadline or not member.alive:
            pytest.fail(f"{member.name} was never assigned partitions\n{member.tail()}")
        await asyncio.sleep(0.1)


async def test_another_topics_projector_leaves_this_group_alone(
    kafka_bootstrap: str, pg_admin_url: str, projection: Projection, tmp_path: Path
) -> None:
    members: list[Member] = []
    logs: list[KafkaEventLog] = []
    async with projection_database(pg_admin_url) as other:
        assert other.version.schema == projection.version.schema  # the default name in both
        try:
            for name, database in (("prod", projection), ("staging", other)):
                settings = Settings(kafka_bootstrap=kafka_bootstrap, topic=unique_topic(name), partitions=2)
                logs.append(await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=settings.topic, partitions=2))
                env = {
                    **settings.subprocess_env(),
                    "CONVLOG_DATABASE_URL": database.url,
                    "CONVLOG_DATA_DIR": str(tmp_path / name),
                    "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": "6000",
                }
                members.append(start_member(name, env, tmp_path, instance_id="projector-0"))
                await _assigned(members[-1])
            prod, staging = members
            await asyncio.sleep(3.0)  # three heartbeats: a rebalance or a fencing would have reached prod
            assert prod.alive, prod.tail()
            assert [c.assigned for c in prod.changes()] == [True], prod.tail()  # never revoked
            assert prod.owned() == staging.owned() == {0, 1}
        finally:
            for m in members:
                m.stop()
            for log in logs:
                await log.close()
