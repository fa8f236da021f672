"""The Go example producer (examples/go-producer: franz-go + twmb/avro, no convlog code), built
with the Go toolchain and run against the local Kafka while ``convlog serve``'s service runs on
the same topic: its records are the golden vectors' bytes on the vectors' partition, and they
are projected and served exactly as sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.example_producers import GO_EXAMPLE, build_go, go_or_skip, run_producer
from tests.kafka.foreign_producer import check_the_vectors_turn_is_served, service_on_own_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


@pytest.fixture(scope="module")
def binary() -> Path:
    return build_go(go_or_skip())


async def test_the_go_producer_writes_the_vectors_and_is_served_exactly(
    binary: Path, kafka_bootstrap: str, pg_admin_url: str, tmp_path: Path
) -> None:
    async with service_on_own_topic(kafka_bootstrap, pg_admin_url, tmp_path, "go") as (svc, settings):
        await check_the_vectors_turn_is_served(
            svc, settings, lambda args: run_producer([str(binary), *args], cwd=GO_EXAMPLE), "the Go producer"
        )
