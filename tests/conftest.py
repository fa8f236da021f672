"""Shared fixtures. Kafka tests need ``CONVLOG_KAFKA_BOOTSTRAP``; without it they skip, unless
``CONVLOG_REQUIRE_SERVICES=1`` (set by ``.ci/run``), where a missing service fails the run."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from events.embedded_log import EmbeddedEventLog
from events.kafka_log import KafkaEventLog
from events.log import EventLog
from events.producer import ConversationProducer
from tests.projection_support import Projection, projection_database
from tests.support import services_required, unique_topic

CONTRACT_PARTITIONS = 4


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    bootstrap = os.environ.get("CONVLOG_KAFKA_BOOTSTRAP")
    if bootstrap:
        return bootstrap
    if services_required():
        pytest.fail("CONVLOG_REQUIRE_SERVICES=1 but CONVLOG_KAFKA_BOOTSTRAP is not set (run `make services-up`)")
    pytest.skip("no Kafka: set CONVLOG_KAFKA_BOOTSTRAP (make services-up) to run Kafka tests")


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
async def event_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventLog]:
    """Every backend of the EventLog port; contract tests run unchanged against each."""
    log: EventLog
    if request.param == "embedded":
        log = EmbeddedEventLog.open(tmp_path / "events.log", partitions=CONTRACT_PARTITIONS)
    else:
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        log = await KafkaEventLog.connect(
            bootstrap=bootstrap, topic=unique_topic(), partitions=CONTRACT_PARTITIONS, append_timeout_s=20
        )
    yield log
    await log.close()


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    url = os.environ.get("CONVLOG_DATABASE_URL")
    if url:
        return url
    if services_required():
        pytest.fail("CONVLOG_REQUIRE_SERVICES=1 but CONVLOG_DATABASE_URL is not set (run `make services-up`)")
    pytest.skip("no Postgres: set CONVLOG_DATABASE_URL (make services-up) to run Postgres tests")


@pytest.fixture
async def projection(pg_admin_url: str) -> AsyncIterator[Projection]:
    """A fresh, migrated database with a live read-models version."""
    async with projection_database(pg_admin_url) as p:
        yield p


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedEventLog]:
    """An embedded log of four partitions in the test's own directory."""
    log = EmbeddedEventLog.open(tmp_path / "events.log", partitions=4)
    yield log
    await log.close()


@pytest.fixture
def producer(log: EmbeddedEventLog) -> ConversationProducer:
    return ConversationProducer(log, producer="test")
