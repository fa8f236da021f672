"""The TypeScript example's sealed mode (examples/ts-producer, ``--key-id``/``--key`` or
``--key-url``/``--token``): Node's built-in crypto (AES-256-GCM) seals every body that carries
content, the records on a real Kafka topic are schema v5 with none of the turn in clear, and they
open, under the conversation's key, to the turn it sent; a flipped bit and a record moved to
another conversation fail authentication. Its ``node --test`` holds the sealer to
schemas/vectors/sealed.json byte for byte (tests/test_ts_producer.py); a real service projecting
and serving its sealed turn, then erasing it, is tests/kafka/test_foreign_sealed_projection.py."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from events.errors import UnauthenticSealError
from events.kafka_log import KafkaEventLog
from tests import sealed_spec
from tests.example_producers import TS_EXAMPLE, build_ts, node_or_skip, run_producer
from tests.kafka.test_go_producer_sealed import (  # the same turn as Go's
    assert_is_the_go_turn,
    check_sealed_under_the_routes_key,
    opened,
)
from tests.kafka.test_java_producer_sealed import (  # the same conversation, key and test key route
    KEY,
    KEY_ID,
    PARTITIONS,
    SECRET,
    read_back,
)
from tests.support import unique_topic

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def main_js() -> tuple[str, Path]:
    node, npm = node_or_skip()
    return node, build_ts(node, npm)


@pytest.fixture
async def kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=unique_topic("ts-sealed"), partitions=PARTITIONS)
    yield log
    await log.close()


def produce(main_js: tuple[str, Path], log: KafkaEventLog, bootstrap: str, *key_args: str) -> list[dict[str, Any]]:
    node, main = main_js
    args = ["--bootstrap", bootstrap, "--topic", log.topic]
    args += ["--tenant", KEY.tenant_id, "--user", KEY.user_id, "--conversation", KEY.conversation_id]
    return run_producer([node, str(main), *args, *key_args], cwd=TS_EXAMPLE)


async def test_the_ts_examples_sealed_records_open_to_the_turn_it_sent(
    main_js: tuple[str, Path], kafka_log: KafkaEventLog, kafka_bootstrap: str
) -> None:
    key_args = ("--key-id", KEY_ID, "--key", base64.b64encode(SECRET).decode())
    sent = await asyncio.to_thread(produce, main_js, kafka_log, kafka_bootstrap, *key_args)
    assert [e["type"] for e in sent] == ["ConversationStarted", *["MessageAppended"] * 6]
    assert [e.get("sealed_by") for e in sent] == [KEY_ID] * 7
    records = await read_back(kafka_log, sent)
    assert_is_the_go_turn(opened(records))  # sealed under KEY_ID, nothing of the turn in clear

    for record in records:  # a flipped bit of the tag, a record moved: neither opens
        value = bytearray(record.value)
        value[-1] ^= 0x01
        with pytest.raises(UnauthenticSealError):
            sealed_spec.open_value(bytes(value), SECRET)
        moved = sealed_spec.read_value(record.value) | {"conversation_id": "another-conversation"}
        with pytest.raises(UnauthenticSealError):
            sealed_spec.open_value(sealed_spec.write_value(moved), SECRET)


async def test_the_ts_example_seals_under_the_key_the_api_hands_out(
    main_js: tuple[str, Path], kafka_log: KafkaEventLog, kafka_bootstrap: str, key_route: str
) -> None:
    await check_sealed_under_the_routes_key(
        lambda *a: produce(main_js, kafka_log, kafka_bootstrap, *a), kafka_log, key_route
    )
