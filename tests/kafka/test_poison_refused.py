"""Records Postgres refuses are poison like records that cannot be decoded: each one a dead
letter with its exact coordinates and a parked conversation, never a stopped projector.

One partition carries, in one batch, a Java-style foreign record (valid Avro single-object
encoding written straight to Kafka, bypassing convlog's producer) with a NUL in its content
(jsonb refuses it), another with a NUL in ``reasoning_content`` (text: the driver refuses it),
a record a deployment's trigger refuses (SQLSTATE 23514), and a neighbour conversation that
keeps projecting. After the fix the operator releases the refused record; the NUL one is
skipped (Postgres can never hold it).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaProducer

from events.codec import default_codec
from events.event_types import Event, MessageAppended
from events.keys import ConversationKey, partition_for_key
from events.log import LogRecord
from events.producer import EVENT_TYPE_HEADER
from projectors.fold import PoisonRecordError
from projectors.rows import record_from_row
from tests.kafka.ops_support import PARTITIONS, Ops
from tests.projection_support import project_all

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

NEIGHBOUR = ConversationKey("acme", "java-user", "neighbour")
PARTITION = partition_for_key(NEIGHBOUR.encode(), PARTITIONS)


def _on_partition(prefix: str) -> ConversationKey:
    """A conversation of the neighbour's partition: the poison and the others share it."""
    for i in range(1000):
        key = ConversationKey("acme", "java-user", f"{prefix}-{i}")
        if partition_for_key(key.encode(), PARTITIONS) == PARTITION:
            return key
    raise AssertionError("no key found")


NUL = _on_partition("nul")
NUL_TEXT = _on_partition("nul-text")
REFUSED = _on_partition("refused")

# A deployment's own rule on the live read models: this content is refused (check_violation).
REFUSING_TRIGGER = """
CREATE FUNCTION {s}.refuse_forbidden() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.content #>> '{{}}' = 'refuse me' THEN
        RAISE EXCEPTION 'this deployment refuses message %%', NEW.message_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_forbidden BEFORE INSERT ON {s}.transcript
    FOR EACH ROW EXECUTE FUNCTION {s}.refuse_forbidden();
"""


@pytest.fixture
async def foreign(ops: Ops, kafka_bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    """A producer as a Java app configures it (acks=all, idempotence, default partitioner)."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    yield producer
    await producer.stop()


async def send_foreign(producer: AIOKafkaProducer, topic: str, key: ConversationKey, body: MessageAppended) -> int:
    """An event encoded with the Avro codec but never validated; its offset."""
    event = Event(event_id=uuid.uuid4().hex, key=key, occurred_at=datetime.now(UTC), producer="java-app", body=body)
    sent = await producer.send_and_wait(
        topic, default_codec().encode(event), key=key.encode(), headers=[(EVENT_TYPE_HEADER, b"MessageAppended")]
    )
    assert sent.partition == PARTITION  # murmur2, as the Java client's default partitioner
    return int(sent.offset)


async def user(ops: Ops, key: ConversationKey, text: str) -> int:
    return (await ops.producer.append_user(key, text)).coordinates.offset


async def read_partition(ops: Ops, end: int) -> Sequence[LogRecord]:
    records: list[LogRecord] = []
    while len(records) < end:
        records.extend((await ops.log.read({PARTITION: len(records)}, max_records=1000, timeout_s=2)).records)
    return records


async def transcript(ops: Ops, key: ConversationKey) -> list[tuple[int, str]]:
    rows = await ops.projection.rows(
        "SELECT seq, content #>> '{{}}' FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq", str(key)
    )
    return [(seq, text) for seq, text in rows]


async def test_refused_records_become_dead_letters_and_the_batch_goes_on(ops: Ops, foreign: AIOKafkaProducer) -> None:
    await ops.projection.execute(REFUSING_TRIGGER)
    o_n0 = await user(ops, NEIGHBOUR, "n0")
    await user(ops, NUL, "hello")
    o_nul = await send_foreign(foreign, ops.topic, NUL, MessageAppended("m-nul", "user", content="a\x00b"))
    await user(ops, REFUSED, "before")
    o_refused = await user(ops, REFUSED, "refuse me")
    await user(ops, NEIGHBOUR, "n1")
    o_held_nul = await user(ops, NUL, "after nul")
    o_held_refused = await user(ops, REFUSED, "after refused")
    thinking = MessageAppended("m-think", "assistant", content="ok", reasoning_content="think\x00ing")
    o_nul_text = await send_foreign(foreign, ops.topic, NUL_TEXT, thinking)
    o_n2 = await user(ops, NEIGHBOUR, "n2")
    assert o_n0 == 0
    records = await read_partition(ops, o_n2 + 1)

    store = ops.projection.store()
    await store.positions(range(PARTITIONS))
    report = await store.apply(records, dict.fromkeys(range(PARTITIONS), 0))  # one batch, one partition

    assert report.positions == {PARTITION: o_n2 + 1}
    assert (report.dead_lettered, report.held) == (3, 2)
    letters = await ops.projection.rows(
        'SELECT partition, "offset", conversation_key, error_code, error, status, id FROM {s}.dead_letters ORDER BY id'
    )
    assert [row[:3] for row in letters] == [
        (PARTITION, o_nul, str(NUL)),
        (PARTITION, o_refused, str(REFUSED)),
        (PARTITION, o_nul_text, str(NUL_TEXT)),
    ]
    # A producer-side NUL check also run on foreign records would refuse the NULs before Postgres does.
    assert {letters[0][3], letters[2][3]} <= {"record_refused", "invalid_event"}
    assert letters[1][3] == "record_refused"
    assert "SQLSTATE 23514" in letters[1][4]
    assert "refuse me" not in letters[1][4]  # the reason names the rule, not the row's content
    assert {row[5] for row in letters} == {"parked"}
    assert await ops.projection.rows("SELECT conversation_key FROM {s}.parked ORDER BY 1") == sorted(
        [(str(NUL),), (str(REFUSED),), (str(NUL_TEXT),)]
    )
    assert await ops.projection.rows('SELECT "offset" FROM {s}.held_records ORDER BY 1') == [
        (o_held_nul,),
        (o_held_refused,),
    ]
    # Everyone else went on, in the same batch and partition.
    assert await transcript(ops, NEIGHBOUR) == [(0, "n0"), (1, "n1"), (2, "n2")]
    assert await transcript(ops, NUL) == [(0, "hello")]
    assert await transcript(ops, REFUSED) == [(0, "before")]

    # Live records go on too; the refused conversation's later ones wait in order.
    await user(ops, NEIGHBOUR, "n3")
    o_later = await user(ops, REFUSED, "later")
    projector = await project_all(ops.log, store)
    assert projector.stats.dead_lettered == 0
    assert (await transcript(ops, NEIGHBOUR))[-1] == (3, "n3")
    assert await ops.projection.rows('SELECT "offset" FROM {s}.held_records ORDER BY 1') == [
        (o_held_nul,),
        (o_held_refused,),
        (o_later,),
    ]

    refused_id, nul_id = str(letters[1][6]), str(letters[0][6])
    listed = ops.run("dead-letters", "list")
    assert f"p{PARTITION}@{o_refused}" in listed.stdout
    # Not fixed yet: the release fails and changes nothing.
    failed = ops.run("dead-letters", "release", refused_id)
    assert failed.returncode == 2
    assert "still fails" in failed.stderr
    assert "23514" in failed.stderr
    assert await transcript(ops, REFUSED) == [(0, "before")]
    # The fix: the rule goes; the release applies the record, then the held ones in log order.
    await ops.projection.execute("DROP TRIGGER refuse_forbidden ON {s}.transcript")
    released = ops.run("dead-letters", "release", refused_id)
    assert released.returncode == 0, released.stderr
    assert "3 event(s) applied" in released.stdout
    assert await transcript(ops, REFUSED) == [(0, "before"), (1, "refuse me"), (2, "after refused"), (3, "later")]

    # A NUL can never be stored: released, it still fails; skipped, the records behind it follow.
    assert ops.run("dead-letters", "release", nul_id).returncode == 2
    skipped = ops.run("dead-letters", "skip", nul_id, "--reason", "NUL from the Java app, ticket 7")
    assert skipped.returncode == 0, skipped.stderr
    assert await transcript(ops, NUL) == [(0, "hello"), (1, "after nul")]
    assert await ops.projection.rows("SELECT status FROM {s}.dead_letters ORDER BY id") == [
        ("skipped",),
        ("released",),
        ("parked",),
    ]
    assert await ops.projection.rows("SELECT conversation_key FROM {s}.parked") == [(str(NUL_TEXT),)]


async def test_a_rebuild_still_fails_fast_on_a_refused_record_naming_it(ops: Ops, foreign: AIOKafkaProducer) -> None:
    await user(ops, NEIGHBOUR, "n0")
    o_nul = await send_foreign(foreign, ops.topic, NUL, MessageAppended("m-nul", "user", content="a\x00b"))
    records = await read_partition(ops, o_nul + 1)
    version = await ops.projection.new_version()
    store = ops.projection.store(schema=version.schema, fail_fast=True)
    await store.positions(range(PARTITIONS))
    with pytest.raises(PoisonRecordError, match=f"partition {PARTITION} offset {o_nul}"):
        await store.apply(records, dict.fromkeys(range(PARTITIONS), 0))
    assert await ops.projection.rows("SELECT count(*) FROM {s}.transcript", schema=version.schema) == [(0,)]


async def test_a_foreign_record_with_a_nul_in_its_key_is_a_dead_letter_and_the_partition_goes_on(
    ops: Ops, foreign: AIOKafkaProducer
) -> None:
    # Postgres text cannot hold the key: not the transcript, not the dead letter's key column,
    # not the event index. The record is still kept (its raw key and value) with coordinates.
    bad = _on_partition_raw(b"acme:java\x00user:")
    await user(ops, NEIGHBOUR, "n0")
    event = Event(
        event_id=uuid.uuid4().hex,
        key=ConversationKey("acme", "java-user", "x"),
        occurred_at=datetime.now(UTC),
        producer="java-app",
        body=MessageAppended("m-key", "user", content="hi"),
    )
    sent = await foreign.send_and_wait(ops.topic, default_codec().encode(event), key=bad)
    assert sent.partition == PARTITION
    await user(ops, NEIGHBOUR, "n1")
    projector = await project_all(ops.log, ops.projection.store())
    assert projector.stats.dead_lettered == 1
    assert await transcript(ops, NEIGHBOUR) == [(0, "n0"), (1, "n1")]
    letters = await ops.projection.rows('SELECT partition, "offset", record_key, status FROM {s}.dead_letters')
    assert letters == [(PARTITION, sent.offset, bad, "parked")]


def _on_partition_raw(prefix: bytes) -> bytes:
    for i in range(1000):
        key = prefix + str(i).encode()
        if partition_for_key(key, PARTITIONS) == PARTITION:
            return key
    raise AssertionError("no key found")


async def test_a_poison_record_whose_header_name_has_a_nul_is_kept_and_the_partition_goes_on(
    ops: Ops, foreign: AIOKafkaProducer
) -> None:
    # Undecodable, so it becomes a dead letter; its headers go to a jsonb column, which refuses
    # a NUL: the name is kept as hex, so the dead letter is written and show/release see it.
    await user(ops, NEIGHBOUR, "n0")
    headers = [("bad\x00name", b"v"), (EVENT_TYPE_HEADER, b"MessageAppended")]
    sent = await foreign.send_and_wait(ops.topic, b"not avro", key=NUL.encode(), headers=headers)
    o_n1 = await user(ops, NEIGHBOUR, "n1")
    projector = await project_all(ops.log, ops.projection.store())
    assert projector.stats.dead_lettered == 1
    assert await transcript(ops, NEIGHBOUR) == [(0, "n0"), (1, "n1")]
    assert o_n1 == sent.offset + 1
    rows = await ops.projection.rows(
        'SELECT partition, "offset", record_key, record_value, headers, record_timestamp FROM {s}.dead_letters'
    )
    assert [row[:2] for row in rows] == [(PARTITION, sent.offset)]
    columns = ("partition", "offset", "record_key", "record_value", "headers", "record_timestamp")
    assert record_from_row(dict(zip(columns, rows[0], strict=True))).headers == tuple(headers)
