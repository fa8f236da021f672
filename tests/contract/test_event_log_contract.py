"""The EventLog contract: one suite, run unchanged against every backend (embedded, Kafka)."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest

from events.errors import LogClosedError, LogError
from events.keys import ConversationKey, partition_for_key
from events.log import Coordinates, EventLog, LogRecord


def _key(conversation: int) -> bytes:
    return ConversationKey("tenant", "user", f"conv-{conversation}").encode()


async def _read_all(log: EventLog, *, expected: int, max_records: int = 1000) -> list[LogRecord]:
    """Read every partition from 0 until ``expected`` records arrived (or 30 s passed)."""
    positions = dict.fromkeys(range(log.partition_count), 0)
    records: list[LogRecord] = []
    deadline = time.monotonic() + 30
    while len(records) < expected and time.monotonic() < deadline:
        batch = (await log.read(positions, max_records=max_records, timeout_s=0.5)).records
        for r in batch:
            assert r.offset >= positions[r.partition], "a record came back before its position"
            positions[r.partition] = r.offset + 1
        records.extend(batch)
    return records


async def test_append_lands_on_the_keys_murmur2_partition(event_log: EventLog) -> None:
    for i in range(20):
        key = _key(i)
        coordinates = await event_log.append(key=key, value=b"v")
        assert coordinates.partition == partition_for_key(key, event_log.partition_count)


async def test_offsets_grow_in_append_order_within_a_partition(event_log: EventLog) -> None:
    key = _key(1)
    offsets = [(await event_log.append(key=key, value=str(i).encode())).offset for i in range(10)]
    assert offsets == sorted(offsets)
    assert len(set(offsets)) == 10


async def test_read_returns_key_value_and_headers_intact_in_order(event_log: EventLog) -> None:
    key = _key(7)
    headers = [("convlog.event_type", b"MessageAppended"), ("x", b"\x00\xff")]
    sent = [await event_log.append(key=key, value=f"value-{i}".encode(), headers=headers) for i in range(5)]
    records = await _read_all(event_log, expected=5)
    assert [r.value for r in records] == [f"value-{i}".encode() for i in range(5)]
    assert [r.coordinates for r in records] == sent
    assert all(r.key == key and list(r.headers) == headers for r in records)


async def test_read_from_a_position_returns_only_the_tail(event_log: EventLog) -> None:
    key = _key(3)
    sent = [await event_log.append(key=key, value=str(i).encode()) for i in range(6)]
    partition = sent[0].partition
    records = (await event_log.read({partition: sent[4].offset}, timeout_s=5)).records
    assert [r.value for r in records] == [b"4", b"5"]


async def test_max_records_bounds_a_batch_and_paging_sees_everything_once(event_log: EventLog) -> None:
    for i in range(40):
        await event_log.append(key=_key(i % 8), value=str(i).encode())
    records = await _read_all(event_log, expected=40, max_records=7)
    assert len(records) == 40
    assert sorted(int(r.value) for r in records) == list(range(40))
    batch = await event_log.read(dict.fromkeys(range(event_log.partition_count), 0), max_records=3, timeout_s=5)
    assert 0 < len(batch.records) <= 3


async def test_read_of_an_empty_tail_waits_at_most_the_timeout(event_log: EventLog) -> None:
    await event_log.append(key=_key(1), value=b"x")
    ends = await event_log.end_offsets()
    started = time.monotonic()
    assert (await event_log.read(ends, timeout_s=0.3)).records == []
    assert time.monotonic() - started < 5


async def test_a_waiting_reader_sees_a_concurrent_append(event_log: EventLog) -> None:
    key = _key(2)
    partition = partition_for_key(key, event_log.partition_count)
    start = (await event_log.end_offsets())[partition]

    async def append_later() -> None:
        await asyncio.sleep(0.2)
        await event_log.append(key=key, value=b"late")

    task = asyncio.create_task(append_later())
    records: list[LogRecord] = []
    for _ in range(20):
        records = list((await event_log.read({partition: start}, timeout_s=1.0)).records)
        if records:
            break
    await task
    assert [r.value for r in records] == [b"late"]


async def test_end_offsets_are_the_next_offsets(event_log: EventLog) -> None:
    before = await event_log.end_offsets()
    assert set(before) == set(range(event_log.partition_count))
    coordinates = await event_log.append(key=_key(5), value=b"x")
    after = await event_log.end_offsets()
    assert after[coordinates.partition] == coordinates.offset + 1
    assert {p: o for p, o in after.items() if p != coordinates.partition} == {
        p: o for p, o in before.items() if p != coordinates.partition
    }


async def test_end_offsets_of_chosen_partitions_are_those_of_all(event_log: EventLog) -> None:
    coordinates = await event_log.append(key=_key(5), value=b"x")
    chosen = [coordinates.partition, (coordinates.partition + 1) % event_log.partition_count]
    assert await event_log.end_offsets(chosen) == {p: (await event_log.end_offsets())[p] for p in chosen}
    assert await event_log.end_offsets([]) == {}


async def test_read_positions_move_past_every_record_and_reach_the_end_offsets(event_log: EventLog) -> None:
    """Progress is the position a read reports (it also moves past offsets without a record for
    this reader, such as Kafka's transaction markers): paging by it reaches the end offsets."""
    for i in range(12):
        await event_log.append(key=_key(i % 5), value=str(i).encode())
    ends = await event_log.end_offsets()
    positions = dict.fromkeys(range(event_log.partition_count), 0)
    seen = 0
    deadline = time.monotonic() + 30
    while positions != ends:
        assert time.monotonic() < deadline, f"positions {positions} never reached the ends {ends}"
        batch = await event_log.read(positions, max_records=5, timeout_s=0.5)
        assert set(batch.positions) == set(positions)
        for r in batch.records:
            assert positions[r.partition] <= r.offset < batch.positions[r.partition]
        assert all(batch.positions[p] >= o for p, o in positions.items())
        seen += len(batch.records)
        positions = dict(batch.positions)
    assert seen == 12
    at_end = await event_log.read(ends, timeout_s=0.2)
    assert (list(at_end.records), dict(at_end.positions)) == ([], ends)


async def test_concurrent_appenders_keep_each_conversations_order(event_log: EventLog) -> None:
    """200 appenders write to 50 conversations at once: every conversation stays on one partition
    and every appender's records appear in the order it appended them, each exactly once."""
    appenders, conversations, per_appender = 200, 50, 5

    async def appender(a: int) -> None:
        key = _key(a % conversations)
        for seq in range(per_appender):
            await event_log.append(key=key, value=f"{a}:{seq}".encode())

    await asyncio.gather(*(appender(a) for a in range(appenders)))
    records = await _read_all(event_log, expected=appenders * per_appender)
    assert len(records) == appenders * per_appender
    partitions_of: dict[bytes, set[int]] = defaultdict(set)
    seen: dict[int, list[int]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        partitions_of[r.key].add(r.partition)
        a, seq = map(int, r.value.split(b":"))
        seen[a].append(seq)
    assert all(len(p) == 1 for p in partitions_of.values())
    assert all(p == {partition_for_key(k, event_log.partition_count)} for k, p in partitions_of.items())
    assert all(seqs == list(range(per_appender)) for seqs in seen.values())
    assert len(seen) == appenders


async def test_unknown_partition_is_a_typed_error(event_log: EventLog) -> None:
    with pytest.raises(LogError, match="does not exist"):
        await event_log.read({event_log.partition_count: 0}, timeout_s=0.1)


async def test_a_closed_log_refuses_work(event_log: EventLog) -> None:
    await event_log.close()
    with pytest.raises(LogClosedError):
        await event_log.append(key=_key(1), value=b"x")
    await event_log.close()  # closing twice is harmless


def _batch(label: str, n: int) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    return [
        (f"{label}-{i}".encode(), [("convlog.event_type", b"MessageAppended"), ("i", str(i).encode())])
        for i in range(n)
    ]


async def test_append_many_lands_contiguously_in_order_on_the_keys_partition(event_log: EventLog) -> None:
    key = _key(11)
    partition = partition_for_key(key, event_log.partition_count)
    await event_log.append(key=key, value=b"before")
    start = (await event_log.end_offsets())[partition]
    values = _batch("b", 5)
    coordinates = await event_log.append_many(key=key, values=values)
    assert coordinates == [Coordinates(partition, start + i) for i in range(5)]
    assert (await event_log.end_offsets())[partition] == start + 5
    after = await event_log.append(key=key, value=b"after")
    assert after.offset == start + 5
    records = await _read_all(event_log, expected=7)
    assert [r.value for r in records] == [b"before", *(v for v, _ in values), b"after"]
    assert [r.coordinates for r in records[1:6]] == coordinates
    assert [list(r.headers) for r in records[1:6]] == [h for _, h in values]  # the headers as given, nothing added
    assert all(r.key == key for r in records)


async def test_append_many_of_nothing_appends_nothing(event_log: EventLog) -> None:
    before = await event_log.end_offsets()
    assert await event_log.append_many(key=_key(12), values=[]) == []
    assert await event_log.end_offsets() == before


async def test_a_batch_of_one_is_an_append(event_log: EventLog) -> None:
    key = _key(13)
    [at] = await event_log.append_many(key=key, values=[(b"only", [("h", b"1")])])
    [record] = await _read_all(event_log, expected=1)
    assert (record.coordinates, record.value, list(record.headers)) == (at, b"only", [("h", b"1")])


async def test_concurrent_appends_never_land_inside_a_batch(event_log: EventLog) -> None:
    """Batches and single appends to one conversation at once: each batch's records stay
    contiguous and in order, and every record is there exactly once."""
    key = _key(14)

    async def batch(b: int) -> list[Coordinates]:
        return await event_log.append_many(key=key, values=_batch(f"batch{b}", 4))

    async def single(s: int) -> list[Coordinates]:
        return [await event_log.append(key=key, value=f"single{s}".encode())]

    results = await asyncio.gather(*(batch(i) if i % 2 else single(i) for i in range(20)))
    records = await _read_all(event_log, expected=10 * 4 + 10)
    assert len(records) == 50
    by_offset = {r.offset: r.value for r in records}
    for i, coordinates in enumerate(results):
        if i % 2:
            offsets = [c.offset for c in coordinates]
            assert offsets == list(range(offsets[0], offsets[0] + 4))
            assert [by_offset[o] for o in offsets] == [f"batch{i}-{j}".encode() for j in range(4)]


async def test_readers_see_a_whole_batch(event_log: EventLog) -> None:
    """A reader waiting at the partition's end gets the batch's records, all of them, in order."""
    key = _key(15)
    partition = partition_for_key(key, event_log.partition_count)
    start = (await event_log.end_offsets())[partition]
    task = asyncio.create_task(event_log.append_many(key=key, values=_batch("w", 6)))
    records: list[LogRecord] = []
    deadline = time.monotonic() + 30
    position = start
    while len(records) < 6 and time.monotonic() < deadline:
        batch = await event_log.read({partition: position}, timeout_s=0.5)
        records.extend(batch.records)
        position = batch.positions[partition]
    await task
    assert [r.value for r in records] == [f"w-{i}".encode() for i in range(6)]
