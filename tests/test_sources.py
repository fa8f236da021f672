"""RecordSource contract (LogSource over the embedded log, KafkaGroupSource) plus group behaviour."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from events.embedded_log import EmbeddedEventLog
from events.errors import LogClosedError
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog, LogRecord
from projectors.errors import PositionBeyondLogEndError, StoreUnavailableError
from projectors.kafka_source import KafkaGroupSource
from projectors.log_source import LogSource
from projectors.ports import RecordSource
from tests.support import unique_topic

PARTITIONS = 4
ALL = frozenset(range(PARTITIONS))


def _key_for(partition: int) -> bytes:
    for i in range(10_000):
        key = ConversationKey("tenant", "user", f"conv-{i}").encode()
        if partition_for_key(key, PARTITIONS) == partition:
            return key
    raise AssertionError(f"no key for partition {partition}")


KEYS = {p: _key_for(p) for p in range(PARTITIONS)}


@dataclass
class Recorder:
    """An AssignmentListener that answers from ``positions`` (default 0) and remembers every call."""

    positions: dict[int, int] = field(default_factory=dict)
    fail_next: int = 0
    delay_s: float = 0  # a slow Postgres
    assigned_calls: list[frozenset[int]] = field(default_factory=list)
    revoked_calls: list[frozenset[int]] = field(default_factory=list)
    owned: set[int] = field(default_factory=set)
    received: list[LogRecord] = field(default_factory=list)
    asked: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_assigned(self, partitions: frozenset[int]) -> Mapping[int, int]:
        self.asked.set()
        await asyncio.sleep(self.delay_s)
        if self.fail_next:
            self.fail_next -= 1
            raise StoreUnavailableError("postgres is away")
        self.assigned_calls.append(partitions)
        self.owned |= partitions
        return {p: self.positions.get(p, 0) for p in partitions}

    async def on_revoked(self, partitions: frozenset[int]) -> None:
        self.revoked_calls.append(partitions)
        self.owned -= partitions


@dataclass
class Harness:
    log: EventLog
    new_source: Callable[[], RecordSource]

    async def append(self, partition: int, count: int) -> None:
        for i in range(count):
            await self.log.append(key=KEYS[partition], value=f"{partition}:{i}".encode())


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    sources: list[RecordSource] = []
    log: EventLog
    if request.param == "embedded":
        log = EmbeddedEventLog.open(tmp_path / "events.log", partitions=PARTITIONS)
        embedded = log

        def new_source() -> RecordSource:
            sources.append(LogSource(embedded))
            return sources[-1]

    else:
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        kafka = await KafkaEventLog.connect(
            bootstrap=bootstrap, topic=unique_topic(), partitions=PARTITIONS, append_timeout_s=20
        )
        log, group = kafka, f"test-group.{uuid.uuid4().hex[:12]}"

        def new_source() -> RecordSource:
            sources.append(_group_source(bootstrap, kafka.topic, group))
            return sources[-1]

    yield Harness(log, new_source)
    for source in sources:
        await source.stop()
    await log.close()


def _group_source(bootstrap: str, topic: str, group: str) -> KafkaGroupSource:
    return KafkaGroupSource(
        bootstrap=bootstrap,
        topic=topic,
        group_id=group,
        session_timeout_ms=6000,  # the broker's group.min.session.timeout.ms
        heartbeat_interval_ms=200,
    )


async def _pump(
    members: Sequence[tuple[RecordSource, Recorder]],
    until: Callable[[list[LogRecord]], bool],
    *,
    max_records: int = 1000,
    deadline_s: float = 20,
    pace_s: float = 0,
) -> list[LogRecord]:
    """Fetch on every member concurrently until ``until(records so far)``; check ownership of each batch."""
    records: list[LogRecord] = []
    deadline = time.monotonic() + deadline_s

    async def one(source: RecordSource, listener: Recorder) -> None:
        batch = (await source.fetch(max_records=max_records, timeout_s=0.2)).records
        assert len(batch) <= max_records
        assert {r.partition for r in batch} <= source.assigned
        assert {r.partition for r in batch} <= listener.owned, "a record of a partition the listener does not own"
        records.extend(batch)
        listener.received.extend(batch)
        await asyncio.sleep(pace_s)

    while not until(records):
        assert time.monotonic() < deadline, f"gave up after {deadline_s}s with {len(records)} records"
        await asyncio.gather(*(one(s, listener) for s, listener in members))
    return records


def _offsets(records: Sequence[LogRecord]) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r.offset)
    return dict(by_partition)


# --- contract: both sources -------------------------------------------------------------------


async def test_a_single_member_is_assigned_every_partition(harness: Harness) -> None:
    source, listener = harness.new_source(), Recorder()
    await source.start(listener)
    await _pump([(source, listener)], lambda _: source.assigned == ALL)
    assert listener.assigned_calls == [ALL]
    assert listener.revoked_calls == []


async def test_fetch_starts_exactly_at_the_positions_the_listener_returned(harness: Harness) -> None:
    for p in range(PARTITIONS):
        await harness.append(p, 6)
    source, listener = harness.new_source(), Recorder(positions={0: 0, 1: 3, 2: 6, 3: 5})
    await source.start(listener)
    records = await _pump([(source, listener)], lambda rs: len(rs) >= 6 + 3 + 0 + 1)
    assert _offsets(records) == {0: [0, 1, 2, 3, 4, 5], 1: [3, 4, 5], 3: [5]}
    assert [r.value for r in records if r.partition == 1] == [b"1:3", b"1:4", b"1:5"]
    # nothing more is waiting, and what is appended now arrives
    assert (await source.fetch(max_records=100, timeout_s=0.3)).records == []
    await harness.log.append(key=KEYS[2], value=b"late")
    records = await _pump([(source, listener)], lambda rs: len(rs) >= 1)
    assert [(r.partition, r.offset, r.value) for r in records] == [(2, 6, b"late")]


async def test_a_stored_position_past_the_log_end_is_refused_not_silently_reset(harness: Harness) -> None:
    """Read models built from another topic (or a topic made anew): Kafka would reset the
    position to the start and the projector would drop every record up to it, forever."""
    for p in range(PARTITIONS):
        await harness.append(p, 2)
    source = harness.new_source()

    async def start_and_read() -> None:
        await source.start(Recorder(positions={1: 9}))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the group source positions (and checks) on a fetch
            await source.fetch(max_records=100, timeout_s=0.2)

    with pytest.raises(PositionBeyondLogEndError, match=r"partition 1 at 9 but the log ends at 2"):
        await start_and_read()
    await source.stop()


async def test_seek_rereads_from_the_given_offset(harness: Harness) -> None:
    await harness.append(1, 5)
    source, listener = harness.new_source(), Recorder()
    await source.start(listener)
    first = await _pump([(source, listener)], lambda rs: len(rs) >= 5)
    assert _offsets(first) == {1: [0, 1, 2, 3, 4]}
    source.seek(1, 2)
    source.seek(PARTITIONS + 7, 0)  # not owned: ignored
    again = await _pump([(source, listener)], lambda rs: len(rs) >= 3)
    assert [(r.offset, r.value) for r in again] == [(2, b"1:2"), (3, b"1:3"), (4, b"1:4")]
    source.seek(1, 4)  # forward works too
    assert [r.offset for r in await _pump([(source, listener)], lambda rs: len(rs) >= 1)] == [4]


async def test_records_of_each_partition_come_in_offset_order(harness: Harness) -> None:
    for i in range(10):
        for p in range(PARTITIONS):
            await harness.log.append(key=KEYS[p], value=f"{p}:{i}".encode())
    source, listener = harness.new_source(), Recorder()
    await source.start(listener)
    records = await _pump([(source, listener)], lambda rs: len(rs) >= 40, max_records=3)
    assert len(records) == 40
    for p, offsets in _offsets(records).items():
        assert offsets == list(range(10)), p
        assert [r.value for r in records if r.partition == p] == [f"{p}:{i}".encode() for i in range(10)]


async def test_stop_revokes_everything_owned_and_fetch_then_fails(harness: Harness) -> None:
    source, listener = harness.new_source(), Recorder()
    await source.start(listener)
    await _pump([(source, listener)], lambda _: source.assigned == ALL)
    await source.stop()
    assert listener.revoked_calls == [ALL]
    assert source.assigned == frozenset()
    with pytest.raises(LogClosedError):
        await source.fetch(max_records=10, timeout_s=0.1)
    await source.stop()  # twice is fine
    assert listener.revoked_calls == [ALL]


# --- Kafka consumer groups --------------------------------------------------------------------


@pytest.fixture
async def kafka_topic(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = await KafkaEventLog.connect(
        bootstrap=kafka_bootstrap, topic=unique_topic(), partitions=PARTITIONS, append_timeout_s=20
    )
    yield log
    await log.close()


async def _group_state(bootstrap: str, group: str) -> tuple[str, int, dict[object, object]]:
    """The group's state, its member count and the offsets it has committed."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_consumer_groups([group])
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    _error, _group, state, _protocol_type, _protocol, members, *_ = described.groups[0]
    return state, len(members), dict(committed)


@pytest.mark.kafka
async def test_two_members_split_the_partitions_and_a_leaver_hands_them_back(
    kafka_bootstrap: str, kafka_topic: KafkaEventLog
) -> None:
    group = f"test-group.{uuid.uuid4().hex[:12]}"
    a, b = (_group_source(kafka_bootstrap, kafka_topic.topic, group) for _ in range(2))
    la, lb = Recorder(), Recorder()
    try:
        backlog = 100
        await asyncio.gather(
            *(kafka_topic.append(key=KEYS[p], value=b"old") for _ in range(backlog) for p in range(PARTITIONS))
        )
        await a.start(la)
        await _pump([(a, la)], lambda rs: a.assigned == ALL and len(rs) > 0, max_records=1)
        started = time.monotonic()
        await b.start(lb)
        # a is still working through the backlog, one slow record at a time, while b joins
        await _pump(
            [(a, la), (b, lb)],
            lambda _: bool(a.assigned) and bool(b.assigned),
            max_records=1,
            pace_s=0.005,
        )
        print(f"rebalance to two members took {time.monotonic() - started:.2f}s")
        assert len(la.received) < backlog * PARTITIONS, "the rebalance came too late to test anything"
        assert la.revoked_calls == [ALL], "eager rebalancing revokes everything the first member had"
        assert a.assigned | b.assigned == ALL
        assert not a.assigned & b.assigned
        assert la.assigned_calls == [ALL, a.assigned]
        assert lb.assigned_calls == [b.assigned]

        # every record now reaches exactly the member that owns its partition
        for p in range(PARTITIONS):
            await kafka_topic.append(key=KEYS[p], value=b"new")
        await _pump([(a, la), (b, lb)], lambda rs: sum(r.value == b"new" for r in rs) >= PARTITIONS)
        new_a = sorted(r.partition for r in la.received if r.value == b"new")
        new_b = sorted(r.partition for r in lb.received if r.value == b"new")
        assert (new_a, new_b) == (sorted(a.assigned), sorted(b.assigned))

        started = time.monotonic()
        owned_by_b = b.assigned
        seen = len(la.received)
        await b.stop()
        assert lb.revoked_calls == [owned_by_b]
        await _pump([(a, la)], lambda _: a.assigned == ALL, deadline_s=10)
        print(f"takeover after a leave took {time.monotonic() - started:.2f}s")
        assert la.assigned_calls[-1] == ALL
        # eager rebalancing re-assigns a's own partitions too: all are re-read from the listener's 0
        total = (backlog + 1) * PARTITIONS
        await _pump([(a, la)], lambda _: len(la.received) - seen >= total)
        again = la.received[seen:]
        assert sorted(_offsets(again).items()) == [(p, list(range(backlog + 1))) for p in range(PARTITIONS)]
        await a.stop()

        state, members, committed = await _group_state(kafka_bootstrap, group)
        assert (state, members) == ("Empty", 0), "stop() left the group"
        assert committed == {}, "positions live in Postgres: nothing is ever committed to Kafka"
    finally:
        await a.stop()
        await b.stop()


@pytest.mark.kafka
async def test_a_failing_listener_surfaces_from_fetch_and_is_asked_again(
    kafka_bootstrap: str, kafka_topic: KafkaEventLog
) -> None:
    await kafka_topic.append(key=KEYS[0], value=b"0:0")
    await kafka_topic.append(key=KEYS[0], value=b"0:1")
    group = f"test-group.{uuid.uuid4().hex[:12]}"
    source = _group_source(kafka_bootstrap, kafka_topic.topic, group)
    listener = Recorder(positions={0: 1}, fail_next=1)
    await source.start(listener)
    try:
        deadline = time.monotonic() + 15
        with pytest.raises(StoreUnavailableError):  # noqa: PT012
            while time.monotonic() < deadline:
                assert (await source.fetch(max_records=10, timeout_s=0.2)).records == []
        records = await _pump([(source, listener)], lambda rs: len(rs) >= 1)
        assert [(r.partition, r.offset) for r in records] == [(0, 1)]
        assert listener.assigned_calls == [ALL]
        assert source.assigned == ALL
    finally:
        await source.stop()
    assert (await _group_state(kafka_bootstrap, group))[2] == {}


@pytest.mark.kafka
async def test_nothing_is_returned_while_a_slow_listener_is_still_loading_positions(
    kafka_bootstrap: str, kafka_topic: KafkaEventLog
) -> None:
    """aiokafka fetches a new partition from auto_offset_reset (0) right after the assignment,
    before anyone has seeked it; the source must not pass that on."""
    for _ in range(10):
        await kafka_topic.append(key=KEYS[0], value=b"v")
    source = _group_source(kafka_bootstrap, kafka_topic.topic, f"test-group.{uuid.uuid4().hex[:12]}")
    listener = Recorder(positions={0: 7}, delay_s=0.5)
    await source.start(listener)
    try:
        records = await _pump([(source, listener)], lambda rs: len(rs) >= 3)
        assert _offsets(records) == {0: [7, 8, 9]}
        assert listener.assigned_calls == [ALL]
    finally:
        await source.stop()


@pytest.mark.kafka
@pytest.mark.slow
async def test_a_listener_slower_than_the_session_timeout_keeps_its_membership(
    kafka_bootstrap: str, kafka_topic: KafkaEventLog
) -> None:
    """aiokafka sends no heartbeats while on_partitions_assigned runs, so positions are loaded
    by fetch instead: a Postgres slower than session_timeout_ms must not cause a rejoin loop."""
    await kafka_topic.append(key=KEYS[1], value=b"v")
    group = f"test-group.{uuid.uuid4().hex[:12]}"
    source = _group_source(kafka_bootstrap, kafka_topic.topic, group)
    listener = Recorder(delay_s=7.0)  # session_timeout_ms is 6000
    await source.start(listener)
    try:
        records = await _pump([(source, listener)], lambda rs: len(rs) >= 1)
        assert [(r.partition, r.offset) for r in records] == [(1, 0)]
        assert (await source.fetch(max_records=10, timeout_s=1.0)).records == []
        assert (listener.assigned_calls, listener.revoked_calls) == ([ALL], [])
        assert (await _group_state(kafka_bootstrap, group))[:2] == ("Stable", 1)
    finally:
        await source.stop()


@pytest.mark.kafka
async def test_an_answer_overtaken_by_a_rebalance_is_revoked_and_asked_for_anew(
    kafka_bootstrap: str, kafka_topic: KafkaEventLog
) -> None:
    """b joins while a's listener is still loading positions: a must tell its listener that the
    answer does not hold (on_revoked), then ask for its new share, so the listener's idea of
    what it owns matches the source's."""
    group = f"test-group.{uuid.uuid4().hex[:12]}"
    a, b = (_group_source(kafka_bootstrap, kafka_topic.topic, group) for _ in range(2))
    la, lb = Recorder(delay_s=1.0), Recorder()
    for p in range(PARTITIONS):
        await kafka_topic.append(key=KEYS[p], value=b"v")
    await a.start(la)
    a_fetching = asyncio.create_task(_pump([(a, la)], lambda _: bool(la.revoked_calls)))
    try:
        await asyncio.wait_for(la.asked.wait(), 15)
        await b.start(lb)
        await a_fetching
        await _pump(
            [(a, la), (b, lb)],
            lambda rs: bool(a.assigned) and bool(b.assigned) and len(rs) >= PARTITIONS,
        )
        assert la.assigned_calls[0] == ALL
        assert la.revoked_calls[0] == ALL, "the overtaken answer was taken back"
        assert (la.owned, lb.owned) == (set(a.assigned), set(b.assigned))
        assert a.assigned | b.assigned == ALL
        assert not a.assigned & b.assigned
    finally:
        a_fetching.cancel()
        await a.stop()
        await b.stop()
