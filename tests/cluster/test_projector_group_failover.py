"""Projector group failover under load: three ``convlog project`` processes in one consumer
group on a six-partition topic while a producer appends; one member is killed with SIGKILL and
a replacement started at once, and a second member is killed as soon as the group reacts to the
first kill (with dynamic membership: mid-rebalance; with static membership, where the
replacement takes the partitions back without a rebalance: at that hand-over).

At the end the read models equal a clean rebuild (``convlog verify --all``), every acknowledged
event is in the transcript exactly once, at its coordinates, and the stored positions are the
log's end — a member that lost its partitions wrote nothing after (the positions fence it).

Measured, with static membership on (each member has a ``CONVLOG_PROJECTOR_INSTANCE_ID``, the
replacement the dead member's) and off: per partition, the first append after a kill until it
is projected (readable), the worst of the dead member's partitions and the worst of the group's
(an eager rebalance stalls every partition, not only the dead member's). With dynamic members
the session timeout is the broker's minimum, 6 s, so the test is bounded; static members run
with convlog's default, 10 s (STATIC_SESSION_TIMEOUT_MS says why).
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from convlog.settings import Settings
from convlog.wiring import make_producer
from devservices.kafka_cluster import KafkaCluster
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from tests.cluster.group_members import REPO, Member, start_member
from tests.projection_support import Projection
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

PARTITIONS = 6
MEMBERS = 3
# Dynamic members: the broker's minimum (group.min.session.timeout.ms), to keep the test short.
# Static members: convlog's default, 10 s — static membership pays only while a restart takes
# less than the session timeout, and a loaded 2-core machine can take 6-9 s to start Python.
DYNAMIC_SESSION_TIMEOUT_MS = 6_000
STATIC_SESSION_TIMEOUT_MS = 10_000
CONVERSATIONS = 60
RATE_PER_S = 100.0
POLL_S = 0.05


@pytest.fixture
def bootstrap(kafka_cluster: KafkaCluster) -> str:
    """The session's three-node cluster: the group coordinator and the topic replicated as in
    production (a single broker shows the same group behaviour; the test is meaningful on both)."""
    return kafka_cluster.bootstrap


@dataclass(frozen=True, slots=True)
class Acked:
    at: float  # epoch seconds when the broker's acknowledgement reached the producer
    partition: int
    offset: int
    event_id: str


@dataclass
class Appends:
    """Appends at a steady rate over many conversations until stopped; every acknowledgement kept."""

    producer: ConversationProducer
    acked: list[Acked] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, writers: int = 12) -> None:
        started = time.monotonic()

        async def writer(w: int) -> None:
            for turn in itertools.count():
                for c in range(w, CONVERSATIONS, writers):
                    if self.stop.is_set():
                        return
                    key = ConversationKey("acme", f"user-{c % 7}", f"conv-{c}")
                    if turn % 2 == 0:
                        appended = await self.producer.append_user(key, f"question {turn}")
                    else:
                        appended = await self.producer.append_assistant(key, f"answer {turn}", finish_reason="stop")
                    self.acked.append(Acked(time.time(), appended.partition, appended.offset, appended.event_id))
                    await asyncio.sleep(max(0.0, len(self.acked) / RATE_PER_S - (time.monotonic() - started)))

        await asyncio.gather(*(writer(w) for w in range(writers)))


@dataclass
class Readable:
    """When each offset became readable: the stored positions, sampled every ``POLL_S``."""

    projection: Projection
    samples: list[tuple[float, dict[int, int]]] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            rows = await self.projection.rows("SELECT partition, next_offset FROM {s}.positions")
            self.samples.append((time.time(), dict(rows)))
            await asyncio.sleep(POLL_S)

    def at(self, partition: int, offset: int) -> float | None:
        return next((t for t, pos in self.samples if pos.get(partition, 0) > offset), None)

    @property
    def latest(self) -> dict[int, int]:
        return self.samples[-1][1] if self.samples else {}


def stalled_s(partitions: frozenset[int], killed_at: float, acked: list[Acked], readable: Readable) -> float:
    """Per partition, the first append after the kill until it is projected; the worst of them."""
    worst = 0.0
    for p in sorted(partitions):
        first = next((a for a in acked if a.partition == p and a.at > killed_at), None)
        assert first is not None, f"no append to partition {p} after the kill"
        at = readable.at(p, first.offset)
        assert at is not None, f"partition {p}'s append at offset {first.offset} never became readable"
        worst = max(worst, at - first.at)
    return worst


async def until(condition: Callable[[], bool], timeout_s: float, what: str, members: list[Member]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n" + "\n".join(m.tail() for m in members))
        await asyncio.sleep(POLL_S)


def covers(members: list[Member], partitions: frozenset[int]) -> bool:
    """Every one of ``members`` owns something, none the same partition, all of them together."""
    owned = [m.owned() for m in members]
    return all(owned) and sum(map(len, owned)) == len(partitions) and frozenset().union(*owned) == partitions


@pytest.mark.parametrize("static", [True, False], ids=["static-membership", "dynamic-membership"])
async def test_group_failover_under_load(
    static: bool, bootstrap: str, projection: Projection, tmp_path: Path, cluster_figure: Callable[[str], None]
) -> None:
    session_timeout_ms = STATIC_SESSION_TIMEOUT_MS if static else DYNAMIC_SESSION_TIMEOUT_MS
    topic = unique_topic("groupfail")
    settings = Settings(kafka_bootstrap=bootstrap, topic=topic, partitions=PARTITIONS)
    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=PARTITIONS)
    env = {
        **settings.subprocess_env(),
        "CONVLOG_DATABASE_URL": projection.url,
        "CONVLOG_DATA_DIR": str(tmp_path),
        "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": str(session_timeout_ms),
    }
    run = uuid.uuid4().hex[:8]  # instance ids are per group; unique so no other run's member is fenced
    all_partitions = frozenset(range(PARTITIONS))
    appends = Appends(make_producer(log, settings, producer="groupfail-test"))
    readable = Readable(projection)
    members = [
        start_member(f"m{i}", env, tmp_path, instance_id=f"{run}-m{i}" if static else None) for i in range(MEMBERS)
    ]
    everyone = list(members)
    tasks = [asyncio.create_task(appends.run()), asyncio.create_task(readable.run())]
    try:
        await until(lambda: covers(members, all_partitions), 60, "three members sharing the partitions", everyone)
        await asyncio.sleep(1.0)  # all three at work

        a, b, c = members
        a_owned = a.owned()
        a.kill(time.time())
        replacement = start_member("m0-replacement", env, tmp_path, instance_id=a.instance_id)
        everyone.append(replacement)
        assert a.killed_at is not None

        def moving() -> bool:  # the group started handing partitions over (or back)
            return any(ch.at > a.killed_at for m in (b, c, replacement) for ch in m.changes())  # type: ignore[operator]

        await until(moving, 60, "the group to react to the kill", everyone)
        b_owned = b.owned_before(a.killed_at)  # what it held before the failover began
        b.kill(time.time())
        assert b.killed_at is not None
        await until(
            lambda: covers([replacement, c], all_partitions), 60, "two members sharing the partitions", everyone
        )
        await asyncio.sleep(2.0)  # appends to every partition after the takeover
        appends.stop.set()
        await tasks[0]
        ends = await log.end_offsets()
        await until(lambda: readable.latest == ends, 60, f"positions to reach the log end {ends}", everyone)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for m in everyone:
            m.stop()
        await log.close()

    def figures(partitions: frozenset[int], killed_at: float) -> str:
        mine = stalled_s(partitions, killed_at, appends.acked, readable)
        group = stalled_s(all_partitions, killed_at, appends.acked, readable)
        return f"its partitions {sorted(partitions)} readable again after {mine:.2f} s, the group's worst {group:.2f} s"

    replacement.changes()
    assert replacement.started_at is not None
    startup_s = replacement.started_at - a.killed_at
    # A static replacement gets the partitions back without a rebalance only if it joins before
    # the broker expires the dead member's session (a loaded machine can start Python slower).
    rejoined_in_time = startup_s < session_timeout_ms / 1000 - 1.0
    fenced = sum(m.conflicts for m in everyone)
    mode = f"static membership {'ON' if static else 'OFF'}, session timeout {session_timeout_ms / 1000:g} s"
    late = "" if rejoined_in_time or not static else ", after its session had expired: the group rebalanced"
    cluster_figure(
        f"{mode}: kill 1, replaced at once: {figures(a_owned, a.killed_at)}"
        f" (the replacement joined {startup_s:.2f} s after the kill{late})"
    )
    cluster_figure(f"{mode}: kill 2, as the group reacted to kill 1, not replaced: {figures(b_owned, b.killed_at)}")
    cluster_figure(
        f"{mode}: {len(appends.acked)} appends at ~{RATE_PER_S:g}/s, all projected once;"
        f" stale batches refused by the positions fence: {fenced}"
    )

    # Every acknowledged event projected exactly once, at its coordinates; nothing else.
    rows = await projection.rows('SELECT partition, "offset", event_id FROM {s}.transcript ORDER BY 1, 2')
    assert rows == sorted((x.partition, x.offset, x.event_id) for x in appends.acked)
    assert await projection.rows("SELECT count(*) FROM {s}.event_ids") == [(len(appends.acked),)]
    assert await projection.rows("SELECT count(*) FROM {s}.dead_letters") == [(0,)]
    # The positions are the log's end: no member that lost a partition moved it afterwards.
    assert dict(await projection.rows("SELECT partition, next_offset FROM {s}.positions")) == ends
    # The tables equal a clean replay of the log.
    verify = subprocess.run(
        [sys.executable, "-m", "convlog.cli.main", "verify", "--all"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    print(f"convlog verify --all: {verify.stdout.strip().splitlines()[-1]}")
    if static and rejoined_in_time:
        # The replacement took the dead member's partitions back as they were, before any
        # survivor gave one up: no rebalance and no wait for the session timeout.
        first = replacement.changes()[0]
        assert first.assigned
        assert first.partitions == a_owned
        survivors_moved = [ch.at for m in (b, c) for ch in m.changes() if ch.at > a.killed_at]
        assert all(first.at <= t for t in survivors_moved)
