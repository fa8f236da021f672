"""The golden vectors of schemas/vectors/ (tests/vectors.py writes them) are what convlog's
Python producer writes now: the committed files cannot drift from the codec or the partitioner.
Java's Avro and kafka-clients, the Go and the TypeScript examples are tested against the same files
(tests/kafka/test_java_producer.py, tests/kafka/test_murmur2_java.py, examples/go-producer's go test,
examples/ts-producer's node --test, and tests/kafka/test_{go,ts}_producer.py on a broker)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events.codec import MAGIC, default_codec
from events.embedded_log import EmbeddedEventLog
from events.keys import ConversationKey, murmur2, partition_for_key
from events.producer import ConversationProducer
from tests import vectors

CODEC = default_codec()


def committed(path: Any) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", [vectors.EVENTS_FILE, vectors.KEYS_FILE], ids=lambda p: p.name)
def test_the_committed_vectors_are_what_the_generator_writes_now(path: Any) -> None:
    assert path.read_text(encoding="utf-8") == vectors.documents()[path], (
        f"{path.name} is stale: run `python -m tests.vectors` and commit it"
    )


def test_the_vectors_are_written_with_the_newest_schema() -> None:
    document = committed(vectors.EVENTS_FILE)
    assert document["schema_version"] == CODEC.version
    assert document["fingerprint"] == CODEC.fingerprint.hex()
    for vector in document["events"] + document["more_events"]:
        value = bytes.fromhex(vector["value_hex"])
        assert value[:2] == MAGIC
        assert value[2:10].hex() == document["fingerprint"]


async def test_the_python_producer_appends_the_vectors_records_byte_for_byte(log: EmbeddedEventLog) -> None:
    document = committed(vectors.EVENTS_FILE)
    turn = document["turn"]
    key = ConversationKey(turn["tenant_id"], turn["user_id"], turn["conversation_id"])
    producer = ConversationProducer(log, producer=turn["producer"])
    expected = document["events"] + document["more_events"]
    for _, event in vectors.turn_events() + vectors.more_events():
        await producer.append(key, event.body, event_id=event.event_id, occurred_at=event.occurred_at)
    batch = await log.read(dict.fromkeys(range(4), 0), timeout_s=1)  # fewer than max_records: one read
    records = sorted(batch.records, key=lambda r: r.offset)
    assert {r.partition for r in records} == {partition_for_key(key.encode(), 4)}
    assert len(records) == len(expected)
    for record, vector in zip(records, expected, strict=True):
        assert record.key == bytes.fromhex(vector["key_hex"]) == vector["key"].encode()
        assert record.value.hex() == vector["value_hex"], vector["name"]
        assert {k: v.decode() for k, v in record.headers} == vector["headers"]
        event = CODEC.decode(record.value)
        assert json.loads(json.dumps(vectors.json_value(CODEC.to_record(event), _optional()))) == vector["record"]


def _optional() -> frozenset[str]:
    schema = json.loads((vectors.REPO / committed(vectors.EVENTS_FILE)["schema"]).read_text(encoding="utf-8"))
    return vectors.optional_named_types(schema)


def test_the_vector_turn_covers_what_the_issue_asks_for() -> None:
    names = [v["name"] for v in committed(vectors.EVENTS_FILE)["events"]]
    assert names[0] == "conversation_started"
    bodies = [e.body for _, e in vectors.turn_events()]
    assert any(getattr(b, "tool_calls", ()) for b in bodies)
    assert any(getattr(b, "tool_call_id", None) for b in bodies)
    assert any(b.__class__.__name__ == "MessageAppended" and b.blocks and b.api for b in bodies)  # type: ignore[union-attr]
    assert "convlog.events.Usage" in _optional()  # a ["null", Usage] union: the record itself


def test_the_key_vectors_are_convlogs_key_and_murmur2_partition() -> None:
    document = committed(vectors.KEYS_FILE)
    assert document["partition_counts"] == list(vectors.PARTITION_COUNTS)
    escaped = 0
    for vector in document["keys"]:
        key = ConversationKey(vector["tenant_id"], vector["user_id"], vector["conversation_id"])
        raw = bytes.fromhex(vector["key_hex"])
        assert raw == key.encode() == vector["key"].encode()
        assert ConversationKey.parse(raw) == key
        assert murmur2(raw) == vector["murmur2"]
        assert vector["partitions"] == {str(n): partition_for_key(raw, n) for n in vectors.PARTITION_COUNTS}
        escaped += "\\" in vector["key"]
    assert escaped >= 2  # keys that need escaping are among them
