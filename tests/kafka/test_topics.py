"""Positions belong to a topic: a database whose read models were built from one topic refuses,
at start and with an actionable error, a projector (or a rebuild) configured with another."""

from __future__ import annotations

import asyncio

import pytest

from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.runtime.projecting import LiveProjector
from convlog.settings import Settings
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.topics import TopicMismatchError, claim_topic
from tests.projection_support import Projection
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

KEY = ConversationKey("acme", "u1", "topic-bound")


def settings_for(kafka_bootstrap: str, projection: Projection, topic: str) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, database_url=projection.url, topic=topic, partitions=3)


async def test_a_projector_on_another_topic_refuses_at_start_naming_both(
    kafka_bootstrap: str, projection: Projection
) -> None:
    first, second = unique_topic("first"), unique_topic("second")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=first, partitions=3)
    try:
        for i in range(5):
            await ConversationProducer(log).append_user(KEY, f"question {i}")
        projector = LiveProjector(settings_for(kafka_bootstrap, projection, first), projection.pool, None)
        stop = asyncio.Event()
        running = asyncio.create_task(projector.run(stop))
        for _ in range(400):
            if sum(projector.positions.values()) == 5:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(running, 30)
        assert await projection.rows("SELECT sum(next_offset)::int FROM {s}.positions") == [(5,)]
    finally:
        await log.close()

    elsewhere = LiveProjector(settings_for(kafka_bootstrap, projection, second), projection.pool, None)
    with pytest.raises(TopicMismatchError) as refused:
        await asyncio.wait_for(elsewhere.start_version(), 30)
    message = str(refused.value)
    assert repr(first) in message
    assert repr(second) in message
    assert f"CONVLOG_TOPIC={first}" in message  # what to do
    assert "CONVLOG_DATABASE_URL" in message


async def test_a_rebuild_does_not_resume_a_version_built_from_another_topic(
    kafka_bootstrap: str, projection: Projection
) -> None:
    first, second = unique_topic("first"), unique_topic("second")
    building = await projection.new_version()  # beside the live one, as `convlog rebuild` makes it
    await claim_topic(projection.pool, building, first)
    with pytest.raises(TopicMismatchError, match=f"version {building.version} .*built from topic '{first}'"):
        await rebuild(settings_for(kafka_bootstrap, projection, second), RebuildOptions(), asyncio.Event())


async def test_a_version_from_before_the_topic_was_recorded_takes_the_topic_it_starts_on(
    kafka_bootstrap: str, projection: Projection
) -> None:
    topic = unique_topic("adopted")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=3)
    await log.close()
    assert await projection.rows("SELECT topic FROM convlog.projection_versions") == [(None,)]  # as migrated
    projector = LiveProjector(settings_for(kafka_bootstrap, projection, topic), projection.pool, None)
    await asyncio.wait_for(projector.start_version(), 30)
    assert await projection.rows("SELECT topic FROM convlog.projection_versions") == [(topic,)]
    again = LiveProjector(settings_for(kafka_bootstrap, projection, topic), projection.pool, None)
    await asyncio.wait_for(again.start_version(), 30)  # the same topic: fine
