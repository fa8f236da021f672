"""Shared fixtures. Kafka tests need ``CONVLOG_KAFKA_BOOTSTRAP``; without it they skip, unless
``CONVLOG_REQUIRE_SERVICES=1`` (set by ``.ci/run``), where a missing service fails the run."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from events.embedded_log import EmbeddedEventLog
from events.kafka_log import KafkaEventLog
from events.log import EventLog
from events.producer import ConversationProducer
from tests.fake_llm import FakeLLM
from tests.projection_support import Projection, projection_database, temporary_database
from tests.support import services_required, unique_topic

if TYPE_CHECKING:
    import httpx

    from convlog.runtime.serve import Service

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
async def fresh_database_url(pg_admin_url: str) -> AsyncIterator[str]:
    """A fresh, empty database (dropped after the test)."""
    async with temporary_database(pg_admin_url) as url:
        yield url


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """An OpenAI-compatible model server on a local port, answering as tests/fake_llm.py scripts it."""
    with FakeLLM().running() as server:
        yield server


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[EmbeddedEventLog]:
    """An embedded log of four partitions in the test's own directory."""
    log = EmbeddedEventLog.open(tmp_path / "events.log", partitions=4)
    yield log
    await log.close()


@pytest.fixture
def producer(log: EmbeddedEventLog) -> ConversationProducer:
    return ConversationProducer(log, producer="test")


# -- the service, in process and served (imported when used: most test modules need neither)


@pytest.fixture
async def api_service(pg_admin_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Service]:
    """The whole service (API, projector, and the summarizer when on) on the embedded log and a
    fresh database: 4 partitions, tenants acme (``token-a``) and globex (``token-b``), no
    summarizer. ``@pytest.mark.service_settings(**fields)`` on a module or test sets other
    :class:`~convlog.settings.Settings` (the test's over the module's); ``indirect``
    parametrization sets the summarizer (``"off"``, ``"on"``)."""
    from convlog.runtime.serve import running_service  # noqa: PLC0415
    from convlog.settings import Settings  # noqa: PLC0415

    fields: dict[str, Any] = {"partitions": 4, "api_tokens": "acme:token-a,globex:token-b", "summarizer": "off"}
    for marker in reversed(list(request.node.iter_markers("service_settings"))):
        fields |= marker.kwargs
    if hasattr(request, "param"):
        fields["summarizer"] = request.param
    async with (
        temporary_database(pg_admin_url) as url,
        running_service(Settings(database_url=url, data_dir=tmp_path, **fields)) as service,
    ):
        yield service


@pytest.fixture
async def http_client(api_service: Service) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of :func:`api_service`'s API, in process."""
    import httpx  # noqa: PLC0415

    from query_api.http import create_app  # noqa: PLC0415

    transport = httpx.ASGITransport(app=create_app(api_service.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
        yield client


@pytest.fixture(scope="module")
def served(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a ``convlog serve`` process of the test module's own, on a fresh database."""
    from tests.live_server import convlog_serve  # noqa: PLC0415

    with convlog_serve(pg_admin_url, tmp_path_factory.mktemp("serve")) as url:
        yield url
