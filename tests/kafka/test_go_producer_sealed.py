"""The Go example's sealed mode (examples/go-producer, ``--key-id``/``--key`` or ``--key-url``/
``--token``): crypto/cipher's AES-GCM seals every body that carries content, the records on a
real Kafka topic are schema v5 with none of the turn in clear, and they open, under the
conversation's key, to the turn it sent; an erase and its kind stay plain. ``go test`` holds the
sealer to schemas/vectors/sealed.json byte for byte (tests/test_go_producer.py)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from events.codec import default_codec
from events.errors import UnauthenticSealError
from events.event_types import ConversationStarted, Event, MessageAppended, ReasoningBlock, TextBlock
from events.kafka_log import KafkaEventLog
from tests import sealed_spec
from tests.example_producers import GO_EXAMPLE, ExampleError, build_go, go_or_skip, run_producer
from tests.kafka.test_java_producer_sealed import (  # the same conversation, key and test key route
    KEY,
    KEY_ID,
    PARTITIONS,
    SECRET,
    TOKEN,
    KeyRoute,
    read_back,
)
from tests.support import unique_topic

pytestmark = pytest.mark.kafka
CODEC = default_codec()
# What the Go turn says, in clear nowhere on the log.
TURN_TEXTS = (
    "Overtime request",
    "How do I file an overtime request in the OA system?",
    '{"q": "overtime request"}',
    "The knowledge base has the procedure.",
    "OA > Attendance > Overtime",
    "oa-assistant",
    "And on a public holiday?",
    "Holiday overtime has a form of its own.",
    "EqQBCgIYAhIM",
)


@pytest.fixture(scope="module")
def binary() -> Path:
    return build_go(go_or_skip())


@pytest.fixture
async def kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=unique_topic("go-sealed"), partitions=PARTITIONS)
    yield log
    await log.close()


def produce(binary: Path, log: KafkaEventLog, bootstrap: str, *key_args: str) -> list[dict[str, Any]]:
    args = ["--bootstrap", bootstrap, "--topic", log.topic]
    args += ["--tenant", KEY.tenant_id, "--user", KEY.user_id, "--conversation", KEY.conversation_id]
    return run_producer([str(binary), *args, *key_args], cwd=GO_EXAMPLE)


def opened(records: list[Any]) -> list[Event]:
    events = []
    for record in records:
        _, body = sealed_spec.read_value(record.value)["body"]
        assert body["sealed"]["key_id"] == KEY_ID
        for text in TURN_TEXTS:
            assert text.encode() not in record.value
        events.append(CODEC.decode(sealed_spec.open_value(record.value, SECRET)))
    return events


def assert_is_the_go_turn(events: list[Event]) -> None:
    assert [e.key for e in events] == [KEY] * 7
    started, question, call, result, answer, follow_up, native = (e.body for e in events)
    assert isinstance(started, ConversationStarted)
    assert (started.title, started.metadata) == ("Overtime request", {"channel": "web"})
    assert isinstance(question, MessageAppended)
    assert (question.content, question.message_id) == (TURN_TEXTS[1], events[1].event_id)
    assert isinstance(call, MessageAppended)
    assert [(c.id, c.name, c.arguments) for c in call.tool_calls] == [("call_1", "search_kb", TURN_TEXTS[2])]
    assert call.reasoning_content == TURN_TEXTS[3]
    assert isinstance(result, MessageAppended)
    assert (result.tool_call_id, TURN_TEXTS[4] in str(result.content)) == ("call_1", True)
    assert isinstance(answer, MessageAppended)
    assert answer.metadata == {"app": "oa-assistant"}
    assert isinstance(follow_up, MessageAppended)
    assert follow_up.content == TURN_TEXTS[6]
    assert isinstance(native, MessageAppended)
    assert native.api == "anthropic"
    assert [type(b) for b in native.blocks] == [ReasoningBlock, ReasoningBlock, TextBlock]
    first = native.blocks[0]
    assert isinstance(first, ReasoningBlock)
    assert (first.text, first.signature) == (TURN_TEXTS[7], TURN_TEXTS[8])


async def test_the_go_examples_sealed_records_open_to_the_turn_it_sent(
    binary: Path, kafka_log: KafkaEventLog, kafka_bootstrap: str
) -> None:
    key_args = ("--key-id", KEY_ID, "--key", base64.b64encode(SECRET).decode())
    sent = await asyncio.to_thread(produce, binary, kafka_log, kafka_bootstrap, *key_args)
    assert [e["type"] for e in sent] == ["ConversationStarted", *["MessageAppended"] * 6]
    assert {e.get("sealed_by") for e in sent} == {KEY_ID}
    records = await read_back(kafka_log, sent)
    assert_is_the_go_turn(opened(records))
    for record in records:  # a flipped bit of the tag fails authentication
        value = bytearray(record.value)
        value[-1] ^= 0x01
        with pytest.raises(UnauthenticSealError):
            sealed_spec.open_value(bytes(value), SECRET)


async def test_the_go_example_seals_under_the_key_the_api_hands_out(
    binary: Path, kafka_log: KafkaEventLog, kafka_bootstrap: str, key_route: str
) -> None:
    await check_sealed_under_the_routes_key(
        lambda *a: produce(binary, kafka_log, kafka_bootstrap, *a), kafka_log, key_route
    )


async def check_sealed_under_the_routes_key(
    run: Callable[..., list[dict[str, Any]]], kafka_log: KafkaEventLog, key_route: str
) -> None:
    """An example run with ``--key-url``/``--token`` (``run(*args)``) fetches one key for the
    whole turn from the test route and seals the turn under it; a refused token writes nothing."""
    sent = await asyncio.to_thread(run, "--key-url", key_route, "--token", TOKEN)
    path = "/v1/users/employee:42/conversations/oa\\sealed/key"  # the token names the tenant
    assert KeyRoute.calls == [(path, f"Bearer {TOKEN}")]  # one key for the whole turn
    assert_is_the_go_turn(opened(await read_back(kafka_log, sent)))

    # A refused token writes nothing: the example stops before its first record.
    before = await kafka_log.end_offsets()
    with pytest.raises(ExampleError, match="401"):
        await asyncio.to_thread(run, "--key-url", key_route, "--token", "x")
    assert await kafka_log.end_offsets() == before
