"""Compressed record batches, as producers in any language send them: every standard codec
decompresses and projects exactly; a batch that still cannot be read stops its partition at
that batch with a dead letter, every other partition goes on, and a restart does not die on it.

The batches are written by aiokafka's own producer with ``compression_type`` set (what a Java
producer's ``compression.type`` does). A client without a codec library is simulated by
hiding aiokafka's codec library (cramjam) from the consumer side only: Kafka and Postgres are
the real ones.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime

import aiokafka.codec
import pytest
from aiokafka import AIOKafkaProducer

from events.codec import default_codec
from events.event_types import Event, MessageAppended
from events.keys import ConversationKey, partition_for_key
from events.producer import EVENT_TYPE_HEADER
from pgstore.store import PostgresProjectionStore
from projectors.kafka_source import KafkaGroupSource
from projectors.ports import UNREADABLE_BATCH
from projectors.runner import Projector
from tests.kafka.ops_support import PARTITIONS, Ops

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

KEYS = [ConversationKey("acme", "java-user", f"c{i}") for i in range(8)]


async def compressed_producer(bootstrap: str, codec: str | None) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, compression_type=codec, linger_ms=100
    )
    await producer.start()
    return producer


def encoded(key: ConversationKey, text: str) -> bytes:
    event = Event(
        event_id=uuid.uuid4().hex,
        key=key,
        occurred_at=datetime.now(UTC),
        producer="java-app",
        body=MessageAppended(uuid.uuid4().hex, "user", content=text),
    )
    return default_codec().encode(event)


async def send_batch(producer: AIOKafkaProducer, topic: str, messages: list[tuple[ConversationKey, str]]) -> None:
    """Sent together (one linger): each partition's records travel in one compressed batch."""
    headers = [(EVENT_TYPE_HEADER, b"MessageAppended")]
    futures = [
        await producer.send(topic, encoded(key, text), key=key.encode(), headers=headers) for key, text in messages
    ]
    await asyncio.gather(*futures)


async def project_until(
    bootstrap: str, topic: str, store: PostgresProjectionStore, until: Mapping[int, int]
) -> Projector:
    """A projector as ``convlog project`` runs it (a consumer group member), until ``until``."""
    source = KafkaGroupSource(
        bootstrap=bootstrap,
        topic=topic,
        group_id=f"codecs.{uuid.uuid4().hex[:8]}",
        session_timeout_ms=6000,
        heartbeat_interval_ms=200,
    )
    projector = Projector(source, store, fetch_timeout_s=0.2)
    await asyncio.wait_for(projector.run(asyncio.Event(), until=until), 60)
    return projector


async def transcripts(ops: Ops) -> dict[str, list[str]]:
    rows = await ops.projection.rows("SELECT conversation_key, content #>> '{{}}' FROM {s}.transcript ORDER BY seq")
    out: dict[str, list[str]] = {}
    for key, text in rows:
        out.setdefault(key, []).append(text)
    return out


@pytest.fixture
def store(ops: Ops) -> PostgresProjectionStore:
    return ops.projection.store()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_each_codecs_batches_project_exactly(
    ops: Ops, kafka_bootstrap: str, store: PostgresProjectionStore, codec: str
) -> None:
    producer = await compressed_producer(kafka_bootstrap, codec)
    try:
        messages = [(key, f"{codec} {key.conversation_id} #{n}") for n in range(5) for key in KEYS]
        await send_batch(producer, ops.topic, messages[:20])
        await send_batch(producer, ops.topic, messages[20:])
    finally:
        await producer.stop()
    ends = await ops.log.end_offsets()
    await project_until(kafka_bootstrap, ops.topic, store, ends)
    expected = {str(key): [f"{codec} {key.conversation_id} #{n}" for n in range(5)] for key in KEYS}
    assert await transcripts(ops) == expected
    assert await ops.projection.rows("SELECT count(*) FROM {s}.dead_letters") == [(0,)]


async def test_an_unreadable_batch_stops_only_its_partition_and_a_restart_survives_it(
    ops: Ops, kafka_bootstrap: str, store: PostgresProjectionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    stuck = partition_for_key(KEYS[0].encode(), PARTITIONS)
    same = [k for k in KEYS if partition_for_key(k.encode(), PARTITIONS) == stuck]
    others = [k for k in KEYS if k not in same]
    assert others
    plain = await compressed_producer(kafka_bootstrap, None)
    lz4 = await compressed_producer(kafka_bootstrap, "lz4")
    try:
        await send_batch(plain, ops.topic, [(k, "before") for k in KEYS])
        batch_start = (await ops.log.end_offsets())[stuck]
        await send_batch(lz4, ops.topic, [(k, f"lz4 {n}") for n in range(3) for k in same])
        await send_batch(plain, ops.topic, [(k, "after") for k in KEYS])
    finally:
        await lz4.stop()
        await plain.stop()
    ends = await ops.log.end_offsets()
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)  # this consumer has no lz4 library

    # Every other partition is projected to its end; the stuck one exactly up to the batch.
    until = {**ends, stuck: batch_start}
    first = await project_until(kafka_bootstrap, ops.topic, store, until)
    assert first.stats.dead_lettered == 1
    letters = await ops.projection.rows(
        'SELECT id, partition, "offset", conversation_key, error_code, error, status FROM {s}.dead_letters'
    )
    [(letter_id, partition, offset, conversation, code, error, status)] = letters
    assert (partition, offset, conversation, code, status) == (stuck, batch_start, None, UNREADABLE_BATCH, "parked")
    assert "UnsupportedCodecError" in error
    assert "lz4" in error
    stored = dict(await ops.projection.rows("SELECT partition, next_offset FROM {s}.positions"))
    assert stored == until
    seen = await transcripts(ops)
    for key in others:
        assert seen[str(key)] == ["before", "after"]
    for key in same:  # nothing of its partition past the batch: order is kept, nothing skipped
        assert seen[str(key)] == ["before"]

    # A restart meets the same batch: it does not die, and it is the same dead letter.
    again = await project_until(kafka_bootstrap, ops.topic, store, until)
    await asyncio.sleep(1)  # let it fetch the stuck partition again
    assert again.stats.dead_lettered <= 1
    assert await ops.projection.rows("SELECT id, status FROM {s}.dead_letters") == [(letter_id, "parked")]
    assert ops.run("dead-letters", "skip", str(letter_id), "--reason", "x").returncode == 2  # its end is unknown

    # The fix (the codec library installed): the partition reads on, in order; the letter is released.
    monkeypatch.undo()
    await project_until(kafka_bootstrap, ops.topic, store, ends)
    seen = await transcripts(ops)
    for key in same:
        assert seen[str(key)] == ["before", "lz4 0", "lz4 1", "lz4 2", "after"]
    released = ops.run("dead-letters", "release", str(letter_id))
    assert released.returncode == 0, released.stderr
    assert await ops.projection.rows("SELECT status FROM {s}.dead_letters") == [("released",)]
