"""Fixtures of the Kafka test modules."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.java_example import classpath_or_skip
from tests.kafka.ops_support import Ops, ops_context
from tests.projection_support import Projection, temporary_database
from tests.support import unique_topic

if TYPE_CHECKING:
    from convlog.runtime.serve import Service
    from convlog.settings import Settings


@pytest.fixture
async def ops(kafka_bootstrap: str, projection: Projection, tmp_path: Path) -> AsyncIterator[Ops]:
    """A fresh topic, a producer on it and the CLI's environment, for the operators' commands."""
    async with ops_context(kafka_bootstrap, projection, tmp_path) as o:
        yield o


@pytest.fixture
async def kafka_service(
    kafka_bootstrap: str, pg_admin_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Service, Settings]]:
    """convlog's service on a Kafka topic of its own, which it creates (before any producer
    runs), and a fresh database: 4 partitions, tenant acme (``token-a``), no summarizer;
    ``@pytest.mark.service_settings(**fields)`` sets other settings, as for ``api_service``."""
    from convlog.runtime.serve import running_service  # noqa: PLC0415
    from convlog.settings import Settings  # noqa: PLC0415

    fields: dict[str, Any] = {"partitions": 4, "api_tokens": "acme:token-a", "summarizer": "off"}
    for marker in reversed(list(request.node.iter_markers("service_settings"))):
        fields |= marker.kwargs
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            kafka_bootstrap=kafka_bootstrap,
            topic=unique_topic("service"),
            database_url=url,
            data_dir=tmp_path,
            **fields,
        )
        async with running_service(settings) as service:
            yield service, settings


@pytest.fixture(scope="module")
def java_classpath() -> str:
    """The Java example producer's classpath (examples/java-producer, built by Maven; without Maven, skipped)."""
    return classpath_or_skip()


@pytest.fixture
def key_route() -> Iterator[str]:
    """The key route of docs/producers.md on a local port, with one conversation's key and one
    token (``KeyRoute`` of tests/kafka/test_java_producer_sealed.py): what the sealed example
    producers fetch their key from, and ``KeyRoute.calls`` what they asked."""
    from tests.kafka.test_java_producer_sealed import KeyRoute  # noqa: PLC0415 -- a test module's, for its siblings

    KeyRoute.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), KeyRoute)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
