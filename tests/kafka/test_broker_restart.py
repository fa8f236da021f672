"""A broker crash while appends are in flight: nothing acknowledged is lost or doubled, and
everything that was not acknowledged failed with a retriable error."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from devservices.cli import KafkaHandle, start_kafka
from events.codec import default_codec
from events.errors import ConvlogError
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from tests.support import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APPENDERS = 24
DOWNTIME_S = 12.0
APPEND_TIMEOUT_S = 6.0  # shorter than the downtime: some appends must give up


@pytest.fixture
def private_broker(tmp_path: Path, kafka_bootstrap: str) -> Iterator[KafkaHandle]:
    """A broker of this test's own, so killing it disturbs no other test."""
    broker = start_kafka(tmp_path / "broker", port=free_port(), controller_port=free_port())
    yield broker
    broker.kill()


async def test_acknowledged_appends_survive_a_broker_crash_exactly_once(private_broker: KafkaHandle) -> None:
    log = await KafkaEventLog.connect(
        bootstrap=private_broker.bootstrap, topic="restart", partitions=3, append_timeout_s=APPEND_TIMEOUT_S
    )
    producer = ConversationProducer(log, producer="restart-test")
    acked: list[str] = []
    failed: dict[str, ConvlogError] = {}
    acked_after_restart = asyncio.Event()
    restarted = False
    stop = asyncio.Event()

    async def appender(a: int) -> None:
        key = ConversationKey("t", "u", f"c{a}")
        seq = 0
        while not stop.is_set():
            event_id = f"{a}-{seq}"
            seq += 1
            try:
                await producer.append_user(key, f"message {event_id}", event_id=event_id)
            except ConvlogError as e:
                failed[event_id] = e
                await asyncio.sleep(0.2)
                continue
            acked.append(event_id)
            if restarted:
                acked_after_restart.set()
            await asyncio.sleep(0.01)

    tasks = [asyncio.create_task(appender(a)) for a in range(APPENDERS)]
    await asyncio.sleep(2)
    assert acked, "nothing was acknowledged before the crash"
    private_broker.kill()
    await asyncio.sleep(DOWNTIME_S)
    await asyncio.to_thread(private_broker.start)
    restarted = True
    await asyncio.wait_for(acked_after_restart.wait(), 90)
    await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*tasks)
    await log.close()

    assert failed, "the outage was too short to fail any append; the test proves nothing"
    assert all(e.retriable for e in failed.values()), {k: repr(e) for k, e in failed.items() if not e.retriable}

    reader = await KafkaEventLog.connect(bootstrap=private_broker.bootstrap, topic="restart", partitions=3)
    try:
        stored = await _all_event_ids(reader, expected_at_least=len(acked))
    finally:
        await reader.close()
    counts = Counter(stored)
    missing = [e for e in acked if counts[e] == 0]
    doubled = [e for e, n in counts.items() if n > 1]
    assert not missing, f"{len(missing)} acknowledged appends are not in the log: {missing[:5]}"
    assert not doubled, f"appends stored twice: {doubled[:5]}"
    assert set(counts) <= set(acked) | set(failed), "the log holds events nobody appended"
    print(f"\nacked={len(acked)} failed(retriable)={len(failed)} failed-but-written={len(set(failed) & set(counts))}")


async def _all_event_ids(log: KafkaEventLog, *, expected_at_least: int) -> list[str]:
    codec = default_codec()
    ends = await log.end_offsets()
    positions = dict.fromkeys(ends, 0)
    ids: list[str] = []
    deadline = time.monotonic() + 60
    while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for record in (await log.read(positions, max_records=5000, timeout_s=1)).records:
            positions[record.partition] = record.offset + 1
            ids.append(codec.decode(record.value).event_id)
    assert len(ids) >= expected_at_least
    return ids
