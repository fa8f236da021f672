"""The KeyRecordLog contract, run unchanged against every backend (memory, the file, Kafka):
the latest record per key id, durable on return, seen by every other handle on its next load."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from events.sealing.ports import KeyRecord
from tests.sealing.conftest import OpenRecords


def _latest(records: Iterable[KeyRecord]) -> dict[str, bytes]:
    return {r.key_id: r.value for r in records}


async def test_nothing_is_there_before_the_first_put(open_records: OpenRecords) -> None:
    assert _latest(await (await open_records()).load()) == {}


async def test_the_last_record_of_a_key_id_wins(open_records: OpenRecords) -> None:
    records = await open_records()
    await records.put([KeyRecord("ck_a", b"a1"), KeyRecord("ck_b", b"b1")])
    await records.put([KeyRecord("ck_a", b"a2")])
    assert _latest(await records.load()) == {"ck_a": b"a2", "ck_b": b"b1"}


async def test_another_handle_sees_every_put_on_its_next_load(open_records: OpenRecords) -> None:
    first, second = await open_records(), await open_records()
    assert _latest(await second.load()) == {}
    await first.put([KeyRecord("uk_1", b"live")])
    assert _latest(await second.load()) == {"uk_1": b"live"}
    await first.put([KeyRecord("uk_1", b"destroyed")])
    assert _latest(await second.load()) == {"uk_1": b"destroyed"}


async def test_two_writers_lose_neither_ones_records(open_records: OpenRecords) -> None:
    first, second = await open_records(), await open_records()
    await first.load()
    await second.load()  # both have seen the same (empty) state before writing
    await asyncio.gather(
        first.put([KeyRecord(f"ck_first{i}", b"1") for i in range(5)]),
        second.put([KeyRecord(f"ck_second{i}", b"2") for i in range(5)]),
    )
    third = await open_records()
    assert len(_latest(await third.load())) == 10


async def test_records_are_any_bytes(open_records: OpenRecords) -> None:
    records = await open_records()
    value = bytes(range(256)) + "ünïcødé\n".encode()
    await records.put([KeyRecord("ck_bytes", value)])
    assert _latest(await (await open_records()).load()) == {"ck_bytes": value}
