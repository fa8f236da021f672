"""The TypeScript example producer (examples/ts-producer: kafkajs + avsc, no convlog code),
installed from its lock file, compiled with tsc and run against the local Kafka while ``convlog
serve``'s service runs on the same topic: its records are the golden vectors' bytes on the
vectors' partition, and they are projected and served exactly as sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.example_producers import TS_EXAMPLE, build_ts, node_or_skip, run_producer
from tests.kafka.foreign_producer import check_the_vectors_turn_is_served, service_on_own_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


@pytest.fixture(scope="module")
def main_js() -> tuple[str, Path]:
    node, npm = node_or_skip()
    return node, build_ts(node, npm)


async def test_the_ts_producer_writes_the_vectors_and_is_served_exactly(
    main_js: tuple[str, Path], kafka_bootstrap: str, pg_admin_url: str, tmp_path: Path
) -> None:
    node, main = main_js
    async with service_on_own_topic(kafka_bootstrap, pg_admin_url, tmp_path, "ts") as (svc, settings):
        run = lambda args: run_producer([node, str(main), *args], cwd=TS_EXAMPLE)  # noqa: E731
        await check_the_vectors_turn_is_served(svc, settings, run, "the TypeScript producer")
