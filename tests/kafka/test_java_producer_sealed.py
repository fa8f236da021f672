"""The Java example's sealed mode (examples/java-producer, ``--key-id``/``--key`` or ``--key-url``/
``--token``): javax.crypto's AES/GCM writes schemas/vectors/sealed.json byte for byte, and the
records it writes to a real Kafka topic are schema v5 with their content sealed — none of it on
the log in clear — that open, under the conversation's key, to the turn it sent; a flipped bit
and a record moved to another conversation fail authentication (docs/producers.md, Sealed
records)."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

import pytest

from events.codec import default_codec
from events.errors import UnauthenticSealError
from events.event_types import ConversationStarted, Event, MessageAppended
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from events.log import LogRecord
from tests import sealed_spec, sealed_vectors
from tests.java_example import JavaExampleError, run_example, run_lines
from tests.support import unique_topic

PARTITIONS = 6
CODEC = default_codec()
KEY = ConversationKey("acme", "employee:42", "oa\\sealed")  # escaped in the key and in the associated data
KEY_ID = "ck_" + secrets.token_hex(16)
SECRET = secrets.token_bytes(32)
TOKEN = "token-java-sealed"  # noqa: S105 -- the test key route's token
# What the turn says, in clear nowhere on the log.
TURN_TEXTS = (
    "Overtime request",
    "How do I file an overtime request in the OA system?",
    '{"q": "overtime request"}',
    "The knowledge base has the procedure.",
    "OA > Attendance > Overtime",
    "Open OA, then Attendance > Overtime, and submit the form.",
    "client",  # the answer's metadata key (its value, java-example, is also the clear producer name)
)


def test_javax_crypto_seals_the_golden_vector_byte_for_byte(java_classpath: str) -> None:
    doc = json.loads(sealed_vectors.SEALED_FILE.read_text(encoding="utf-8"))
    key = doc["test_only_key"]
    pairs = [f"{r['nonce_hex']}:{r['plain_value_hex']}" for r in doc["records"]]
    sealed = run_lines(java_classpath, "--seal-vector", doc["schema"], key["key_id"], key["key_base64"], *pairs)
    assert sealed == [r["value_hex"] for r in doc["records"]]


@pytest.fixture
async def kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = await KafkaEventLog.connect(
        bootstrap=kafka_bootstrap, topic=unique_topic("java-sealed"), partitions=PARTITIONS
    )
    yield log
    await log.close()


def produce(classpath: str, log: KafkaEventLog, bootstrap: str, *key_args: str) -> list[dict[str, Any]]:
    args = ["--bootstrap", bootstrap, "--topic", log.topic]
    args += ["--tenant", KEY.tenant_id, "--user", KEY.user_id, "--conversation", KEY.conversation_id]
    return run_example(classpath, *args, *key_args)


async def read_back(log: KafkaEventLog, sent: list[dict[str, Any]]) -> list[LogRecord]:
    partition = partition_for_key(KEY.encode(), PARTITIONS)
    assert {e["partition"] for e in sent} == {partition}
    records: list[LogRecord] = []
    position = 0
    async with asyncio.timeout(60):
        while len(records) < len(sent):
            batch = await log.read({partition: position}, timeout_s=1.0)
            records.extend(batch.records)
            position = batch.positions.get(partition, position)
    assert [r.offset for r in records] == [e["offset"] for e in sent]
    return records


def opened_turn(records: list[LogRecord], secret: bytes, key_id: str) -> list[Event]:
    """Every record sealed under ``key_id``, nothing of the turn in clear; opened, the turn."""
    events = []
    for record in records:
        sealed = sealed_spec.read_value(record.value)  # schema v5: the header is v5's fingerprint
        _, body = sealed["body"]
        assert body["sealed"]["key_id"] == key_id
        for text in TURN_TEXTS:
            assert text.encode() not in record.value
        events.append(CODEC.decode(sealed_spec.open_value(record.value, secret)))
    return events


def assert_is_the_turn(events: list[Event]) -> None:
    assert [e.key for e in events] == [KEY] * 5
    started, question, call, result, answer = (e.body for e in events)
    assert isinstance(started, ConversationStarted)
    assert started.title == "Overtime request"
    assert isinstance(question, MessageAppended)
    assert (question.role, question.content, question.message_id) == ("user", TURN_TEXTS[1], events[1].event_id)
    assert isinstance(call, MessageAppended)
    assert [(c.id, c.name, c.arguments) for c in call.tool_calls] == [("call_1", "search_kb", TURN_TEXTS[2])]
    assert call.reasoning_content == TURN_TEXTS[3]
    assert (call.model, call.finish_reason) == ("gpt-4o", "tool_calls")
    assert isinstance(result, MessageAppended)
    assert (result.role, result.tool_call_id) == ("tool", "call_1")
    assert isinstance(answer, MessageAppended)
    assert (answer.content, answer.metadata, answer.finish_reason) == (
        TURN_TEXTS[5],
        {"client": "java-example"},
        "stop",
    )
    assert answer.usage is not None
    assert answer.usage.cached_tokens == 64


@pytest.mark.kafka
async def test_the_java_examples_sealed_records_open_to_the_turn_it_sent(
    java_classpath: str, kafka_log: KafkaEventLog, kafka_bootstrap: str
) -> None:
    key_args = ("--key-id", KEY_ID, "--key", base64.b64encode(SECRET).decode())
    sent = await asyncio.to_thread(produce, java_classpath, kafka_log, kafka_bootstrap, *key_args)
    assert [e["type"] for e in sent] == ["ConversationStarted", *["MessageAppended"] * 4]
    assert {e["sealed_by"] for e in sent} == {KEY_ID}
    records = await read_back(kafka_log, sent)
    assert_is_the_turn(opened_turn(records, SECRET, KEY_ID))

    # Bad input: each record with a flipped bit, and moved to another conversation's key.
    for record in records:
        value = bytearray(record.value)
        value[-1] ^= 0x01  # the last byte of the tag
        with pytest.raises(UnauthenticSealError):
            sealed_spec.open_value(bytes(value), SECRET)
        moved = sealed_spec.read_value(record.value) | {"conversation_id": "another-conversation"}
        with pytest.raises(UnauthenticSealError):
            sealed_spec.open_value(sealed_spec.write_value(moved), SECRET)


class KeyRoute(BaseHTTPRequestHandler):
    """The HTTP API's key route as docs/producers.md specifies it, with one conversation's key."""

    calls: list[tuple[str, str | None]] = []  # noqa: RUF012 -- what the example asked, per server

    def do_POST(self) -> None:
        self.calls.append((unquote(self.path), self.headers.get("Authorization")))
        wanted = f"/v1/users/{KEY.user_id}/conversations/{KEY.conversation_id}/key"
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._answer(401, {"error": "unauthorized"})
        elif unquote(self.path) != wanted:
            self._answer(404, {"error": "not_found"})
        else:
            self._answer(200, {"key_id": KEY_ID, "key": base64.b64encode(SECRET).decode(), "algorithm": "AES-256-GCM"})

    def _answer(self, status: int, body: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the base class's name
        """Quiet: the test asserts on ``calls``."""


@pytest.mark.kafka
async def test_the_java_example_seals_under_the_key_the_api_hands_out(
    java_classpath: str, kafka_log: KafkaEventLog, kafka_bootstrap: str, key_route: str
) -> None:
    sent = await asyncio.to_thread(
        produce, java_classpath, kafka_log, kafka_bootstrap, "--key-url", key_route, "--token", TOKEN
    )
    path = "/v1/users/employee:42/conversations/oa\\sealed/key"
    assert KeyRoute.calls == [(path, f"Bearer {TOKEN}")]  # one key for the whole turn
    assert_is_the_turn(opened_turn(await read_back(kafka_log, sent), SECRET, KEY_ID))

    # A refused token writes nothing: the example stops before its first record.
    before = await kafka_log.end_offsets()
    with pytest.raises(JavaExampleError, match="401"):
        await asyncio.to_thread(
            produce, java_classpath, kafka_log, kafka_bootstrap, "--key-url", key_route, "--token", "wrong"
        )
    assert await kafka_log.end_offsets() == before
