"""The sealing suites' backends: every :class:`KeyRecordLog` (memory, the file, real Kafka),
each able to open a second handle on the same records, as a second process would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from events.sealing.file_keys import FileKeyRecordLog
from events.sealing.kafka_keys import KafkaKeyRecordLog
from events.sealing.memory_keys import MemoryKeyRecordLog
from events.sealing.ports import KeyRecordLog
from tests.support import unique_topic

OpenRecords = Callable[[], Awaitable[KeyRecordLog]]


@pytest.fixture(params=["memory", "file", pytest.param("kafka", marks=pytest.mark.kafka)])
async def open_records(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenRecords]:
    """Opens another handle on one backend's records; every handle is closed after the test."""
    opened: list[KeyRecordLog] = []
    shared = MemoryKeyRecordLog()
    topic = unique_topic("keys")

    async def open_one() -> KeyRecordLog:
        records: KeyRecordLog
        if request.param == "memory":
            records = shared.handle()
        elif request.param == "file":
            records = FileKeyRecordLog(tmp_path / "log" / "convlog.events.keys")
        else:
            bootstrap = request.getfixturevalue("kafka_bootstrap")
            records = await KafkaKeyRecordLog.connect(bootstrap=bootstrap, topic=topic, timeout_s=20)
        opened.append(records)
        return records

    yield open_one
    for records in opened:
        await records.close()
